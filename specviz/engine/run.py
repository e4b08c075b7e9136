"""The speculative loop: a run's prefill, its steps and its result. Each step (step.py) drafts up to gamma
tokens, verifies them with the last accepted token in one forward pass of the target, keeps the accepted prefix
and the resampled or bonus token, and tells the proposer; its record (step_records.py) is yielded.

Where the device loop applies (device_loop.py: runs on the fast path whose proposer drafts on the device), it runs
the same steps with everything on the device, and the host only reads their outcomes into the same records.
Plain decoding is the same loop with a proposer that never drafts, so both pay the same overheads.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
import warnings
from collections.abc import Callable, Iterator

import torch

from . import step
from ..rule import verify as verification
from ..rule import wrong_verifiers
from ..runners.clock import device_clock
from .device_loop import DeviceLoop
from ..errors import InvalidSettingError
from ..methods import tree_drafting
from ..records.metrics import summarize
from ..models.loading import LoadedModel
from ..options import EngineOptions
from ..proposers import Proposer
from ..records.schema import RunResult, StepRecord, TokenKind, TokenRecord
from ..runners.static import make_runner
from ..rule.sampling import make_generator
from ..settings import DecodeSettings
from .step_records import (TOP_N, StepTiming, accepted_in_output, figures_from_device, figures_from_logits,
                           name_tree_nodes, step_record)
from .text import IncrementalDetokenizer


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for a run: a full collection walks every object alive (torch's
    modules, a loaded model, the records so far) and would land inside whichever step allocated last, many
    times a GPU step's length. Reference counting still frees what a step drops; the collector resumes (as it was) when
    the run ends or is abandoned."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def check_prompt(target: LoadedModel, prompt_ids: list[int], settings: DecodeSettings) -> None:
    context = target.context_length
    if not prompt_ids:
        raise InvalidSettingError("the prompt is empty; type some text")
    if len(prompt_ids) >= context:
        raise InvalidSettingError(
            f"the prompt is {len(prompt_ids)} tokens, longer than the model's context of {context}; shorten it"
        )
    if len(prompt_ids) + settings.max_new_tokens > context:
        room = context - len(prompt_ids)
        raise InvalidSettingError(
            f"max-new-tokens {settings.max_new_tokens} goes beyond the context: the prompt takes {len(prompt_ids)} "
            f"of {context} tokens, so at most {room} new tokens fit"
        )


class RunProgress(step.Row):
    """A run's one row (step.Row) and what the host loop keeps beside it: the accepted sequence also on the device
    (what proposers read: a view of one buffer that grows by writing, never by concatenating), the tokens shown,
    the detokenizer, and the run's clock."""

    def __init__(self, prompt_ids: list[int], max_new_tokens: int, device: torch.device, start: float, eos_ids,
                 detokenizer: IncrementalDetokenizer, generator: torch.Generator):
        super().__init__(list(prompt_ids), max_new_tokens, eos_ids, generator)
        size = len(self.sequence) + max_new_tokens + 1
        # the host side of every copy into the buffer: on a GPU pinned memory, so that a step's copy runs
        # asynchronously (a plain copy from the host waits for the device); each slot is written once
        self.staging = torch.empty(size, dtype=torch.long, pin_memory=device.type == "cuda")
        self.staged = self.staging.numpy()
        self.staged[: len(self.sequence)] = self.sequence
        self.buffer = self.staging if device.type == "cpu" else torch.empty(size, dtype=torch.long, device=device)
        if self.buffer is not self.staging:
            self.buffer[: len(self.sequence)].copy_(self.staging[: len(self.sequence)])
        self.shown: list[TokenRecord] = []
        self.start, self.detokenizer = start, detokenizer
        self.prefill_seconds = 0.0
        self.prefill_events = None  # (start, end) CUDA events where the prefill is timed on the device
        self.prompt_hidden = None  # the target's hidden states over the prompt but its last token (the prefill's)

    @property
    def tokens(self) -> torch.Tensor:
        """The accepted sequence on the device."""
        return self.buffer[: len(self.sequence)]

    def keep(self, new_ids: list[int], on_device: bool = True) -> list[int]:
        """step.Row.keep, and what it kept onto the device's copy too (asynchronously); on_device=False where
        the device loop holds its own copy."""
        kept = super().keep(new_ids)
        if on_device and kept:
            end = len(self.sequence)
            begin = end - len(kept)
            self.staged[begin:end] = kept
            if self.buffer is not self.staging:
                self.buffer[begin:end].copy_(self.staging[begin:end], non_blocking=True)
        return kept


class SpeculativeRun:
    """Iterate to run it step by step (a StepRecord per step); `result` is set once the run has ended.

    detail=True (the app) fills every record: token texts, p and q of each draft, top-20 lists. detail=False
    (the bench) keeps ids, kinds, decisions and timings and skips the per-step display work: probabilities
    are NaN, top lists and token texts empty; result.text is still the decoded output.

    options: the engine's switches (EngineOptions; None: read from the environment here, once), passed down
    to the runner the run makes and to its device loop."""

    def __init__(
        self,
        target: LoadedModel,
        proposer: Proposer,
        prompt_ids: list[int],
        settings: DecodeSettings,
        prompt_text: str = "",
        runner=None,  # a CausalRunner or runners.static.StaticRunner; default: the fastest for the target
        verifier: Callable | None = None,  # replaces verify_sampled (tests use it to plant a wrong verifier)
        detail: bool = True,
        options: EngineOptions | None = None,
    ):
        self.settings = settings.validate()
        self.options = options or EngineOptions.from_environment()
        check_prompt(target, prompt_ids, self.settings)
        self.target = target
        self.proposer = proposer
        self.prompt_ids = list(prompt_ids)
        self.prompt_text = prompt_text
        self._owns_runner = runner is None
        # a drafter that reads several of the target's layers (DFlash) is handed their outputs as hidden states
        self.runner = runner or make_runner(target.model, options=self.options, features=proposer.target_layers)
        if self.settings.tree and not proposer.drafts_trees:
            if proposer.drafts:  # plain decoding drafts nothing: nothing to say
                warnings.warn(f"specviz: {proposer.name} drafts chains; draft trees are for {tree_drafting()}")
            self.settings = dataclasses.replace(self.settings, tree=0)
        if self.settings.tree and not self.runner.supports_tree:
            warnings.warn(f"specviz: {type(self.runner).__name__} cannot verify draft trees; drafting chains")
            self.settings = dataclasses.replace(self.settings, tree=0)
        self.context = target.context_length  # read once: a property that walks the config
        self.verify_sampled = verifier or verification.verify_sampled
        self.detail = detail
        self.result: RunResult | None = None
        self.steps: list[StepRecord] = []
        self.tokens: torch.Tensor | None = None  # the accepted sequence (prompt + output) while it runs

    def __iter__(self) -> Iterator[StepRecord]:
        try:
            with collector_paused():
                yield from self._run()
        finally:  # also when the caller stops early: the runner's cache and graphs go back to the pool
            if self._owns_runner:
                self.runner.release()
            self.proposer.release()  # and the proposer's (a tree drafter's cache and graphs), for the next run

    def _run(self) -> Iterator[StepRecord]:
        """Prefill, then steps (on the device where the device loop applies, else on the host), then the result."""
        loop = self._device_loop()
        run = self._prefill(timed_by_events=loop is not None and loop.graphs)
        if loop is not None:
            yield from self._run_on_device(loop, run)
        while loop is None and not run.finished:
            yield self._host_step(run)
        self.result = self._finish(run, "host" if loop is None else "device")

    def _host_step(self, run: RunProgress) -> StepRecord:
        """One speculative step on the host (step.py): draft, verify, keep, observe; then its record."""
        settings, runner, proposer = self.settings, self.runner, self.proposer
        started = time.perf_counter()
        # 1. draft: up to gamma tokens, fewer near the token limit or the context's end
        draft = step.propose(proposer, run.tokens, run.draft_length(settings, self.context), settings.tree,
                             self.context - len(run.sequence), runner.device)
        # the device is waited for only where a step's timing needs it: drafting that runs on the host (lookups)
        # is timed by the host clock alone, and a verify pass has ended once its result has been read
        drafted = time.perf_counter() if proposer.drafts_on_host else device_clock(runner.device)
        # 2. verify: the last accepted token and the drafts in one forward; accept a prefix, draw the next token
        checked = step.verify(runner, draft, draft.token_ids.tolist(), run.sequence[-1], settings, run.generator,
                              self.verify_sampled, keep_rows=self.detail or proposer.needs_target_hidden)
        verified = time.perf_counter()
        verdict = checked.verdict
        # 3. keep: the accepted drafts and the next token, up to the token limit or an end of sequence
        kept = run.keep(checked.shown_ids[:verdict.n_accepted] + [verdict.next_token])
        self.tokens = run.tokens
        # 4. observe: the proposer catches up (its cache; the target's hidden states at the kept positions)
        proposer.observe(step.feedback(run.tokens, checked.shown, verdict, kept, drafted - started, verified - drafted,
                                       checked.hidden if proposer.needs_target_hidden else None))
        timing = StepTiming((drafted - started) * 1e3, (verified - drafted) * 1e3, time.perf_counter() - run.start,
                            len(run.output))  # no sync: the next step's has it
        figures = None
        if self.detail:
            figures = figures_from_logits(checked.shown.probs, checked.shown.logits, checked.shown_ids, checked.logits,
                                          verdict, settings, accepted_in_output(verdict.n_accepted, kept)[0])
        # a tree's candidates named before the step's tokens advance the detokenizer: each as it would follow
        # the output so far (a deeper node's ancestors are left out of its text)
        nodes = name_tree_nodes(checked.nodes, run.detokenizer.peek) if self.detail else checked.nodes
        record = step_record(len(self.steps), checked.shown_ids, verdict, kept, timing, figures, run.detokenizer)
        record.tree_size, record.doubted, record.tree = checked.tree_size, checked.shown.doubted, nodes
        return self._add(run, record)

    def _run_on_device(self, loop: DeviceLoop, run: RunProgress) -> Iterator[StepRecord]:
        """The same steps run by a DeviceLoop: its outcomes (read one step behind the device) kept and recorded
        as the host loop keeps and records its own."""
        settings = self.settings
        for outcome in loop.steps(run.tokens, settings.max_new_tokens, run.prompt_hidden, settings,
                                  run.generator.initial_seed()):
            n, choices = outcome.n_accepted, outcome.choices
            accept_probs = outcome.accept_probs or [float(d == c) for d, c in zip(outcome.draft_ids, choices)]
            verdict = verification.Verdict(n_accepted=n, next_token=outcome.next_token, uniforms=outcome.uniforms,
                                           next_distribution=None, accept_probs=accept_probs)
            kept = run.keep(outcome.draft_ids[:n] + [verdict.next_token], on_device=False)  # the loop has its own
            timing = StepTiming(outcome.draft_ms, outcome.verify_ms, time.perf_counter() - run.start, len(run.output))
            figures = None
            if outcome.detail is not None:
                figures = figures_from_device(outcome.detail, accepted_in_output(n, kept)[0])
            nodes = name_tree_nodes(outcome.nodes, run.detokenizer.peek) if figures is not None else outcome.nodes
            record = step_record(len(self.steps), outcome.draft_ids, verdict, kept, timing, figures, run.detokenizer)
            record.tree_size, record.doubted, record.tree = outcome.tree_size, outcome.doubted, nodes
            yield self._add(run, record)
            if run.finished:
                break

    def _add(self, run: RunProgress, record: StepRecord) -> StepRecord:
        self.steps.append(record)
        run.shown.extend(record.tokens)
        return record

    def _prefill(self, timed_by_events: bool) -> RunProgress:
        """The prompt into the target's cache (all of it but its last token: each step feeds the last one) and
        the proposer reset. timed_by_events: the device loop's steps queue behind the prefill, so it is timed by
        CUDA events rather than waited for."""
        settings, runner, device = self.settings, self.runner, self.runner.device
        start = device_clock(device)
        events = (torch.cuda.Event(enable_timing=True),
                  torch.cuda.Event(enable_timing=True)) if timed_by_events else None
        if events:
            events[0].record()
        run = RunProgress(self.prompt_ids, settings.max_new_tokens, device, start,
                          eos_ids=self.target.eos_token_ids if settings.stop_at_eos else set(),
                          detokenizer=IncrementalDetokenizer(self.target.tokenizer),
                          generator=make_generator(settings.seed, device))
        runner.reset()
        prompt_hidden = None
        if len(run.sequence) > 1:
            _, prompt_hidden = runner.forward(run.tokens[:-1], logits_for="none")  # the logits are not read
        run.prompt_hidden = prompt_hidden
        self.proposer.reset(run.tokens, settings, run.generator,
                            prompt_hidden if self.proposer.needs_target_hidden else None)
        self.tokens = run.tokens
        if events:
            events[1].record()
            run.prefill_events = events
        else:
            run.prefill_seconds = device_clock(device) - start
        return run

    def _finish(self, run: "RunProgress", loop: str) -> RunResult:
        settings, target, runner = self.settings, self.target, self.runner
        if self.detail:
            held_back = run.detokenizer.flush()  # the run ended inside a multi-byte character
            emitted_tokens = [t for t in run.shown if t.kind != TokenKind.REJECTED]
            if held_back and emitted_tokens:
                emitted_tokens[-1].text += held_back
        wall = device_clock(runner.device) - run.start
        if run.prefill_events is not None:
            run.prefill_seconds = run.prefill_events[0].elapsed_time(run.prefill_events[1]) / 1e3
        return RunResult(
            method=self.proposer.name,
            prompt=self.prompt_text,
            prompt_tokens=len(self.prompt_ids),
            text=run.detokenizer.decode(run.output),
            token_ids=run.output,
            tokens=run.shown,
            steps=self.steps,
            metrics=summarize(self.steps, len(run.output), wall, run.prefill_seconds),
            settings={**settings.__dict__, "target": target.name, "device": str(runner.device),
                      "dtype": str(target.dtype).replace("torch.", ""), "runner": type(runner).__name__,
                      "loop": loop, "exact_forward": exact_forward(runner, settings)},
            stop_reason=run.stop_reason,
        )

    def _device_loop(self):
        """A DeviceLoop (device_loop.py) for this run where one applies, its graphs captured; None otherwise
        (and when capturing fails: the host loop then runs, with a warning)."""
        residual = wrong_verifiers.ON_DEVICE.get(self.verify_sampled)  # a verifier planted by a test: on the host
        if residual is None and not self.settings.greedy:
            return None
        loop = DeviceLoop.for_run(self.runner, self.proposer, self.settings, TOP_N if self.detail else 0,
                                  len(self.prompt_ids), residual=residual is not False, options=self.options)
        if loop is not None:
            try:
                loop.prepare(len(self.prompt_ids) + self.settings.max_new_tokens)
            except Exception as error:  # an optimisation: never fail a run over it
                warnings.warn(f"specviz: the device loop is unavailable ({type(error).__name__}: {str(error)[:200]}); "
                              "running the host loop")
                return None
        return loop


def exact_forward(runner, settings: DecodeSettings) -> bool:
    """Whether every forward of the run computed each position as plain decoding computes it (the exact mode,
    runners/exact.py): its runner runs the mode and its widest verify pass is within the mode's width. In
    float32 on a CPU this holds without the mode, but the engine does not claim it there."""
    width = (settings.tree or settings.gamma) + 1
    return width <= getattr(runner, "exact_width", 0)
