"""The speculative loop. One step: the proposer drafts up to gamma tokens; the target scores the last accepted
token and the drafts in one forward pass (gamma + 1 positions); the verifier accepts a prefix and draws the
resampled or bonus token; both KV caches drop what was rejected. Every step yields a StepRecord.

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

from . import verify as verification
from .clock import device_clock
from .errors import InvalidSettingError
from .metrics import summarize
from .models import LoadedModel
from .options import EngineOptions
from .proposers import Draft, Feedback, Proposer
from .records import DraftPosition, RunResult, StepRecord, TokenKind, TokenRecord, TopTokens
from .device_loop import DeviceLoop
from .runners.static import make_runner
from .sampling import display_probs, make_generator, warp_probs
from .settings import DecodeSettings
from . import tree as trees
from .text import IncrementalDetokenizer

TOP_N = 20  # tokens of p and q kept per position for the inspector


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for a run: a full collection walks every object alive (torch's
    modules, a loaded model, the records so far) and would land inside whichever step allocated last, on a GPU
    a step of ~1 ms. Reference counting still frees what a step drops; the collector resumes (as it was) when
    the run ends or is abandoned."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def accepted_in_output(n_verified: int, kept: list[int]) -> tuple[int, bool]:
    """(drafts the output kept, whether the step was cut). A step is cut when an end-of-sequence token or the
    token limit ends the output inside its accepted drafts: drafts the target accepted after the cut are not
    part of the output, so they do not count as accepted (alpha, tau and the per-position curve agree)."""
    cut = len(kept) <= n_verified
    return (len(kept) if cut else n_verified), cut


def position_state(i: int, n: int, cut: bool, uniforms: list[float] | None) -> tuple[bool, bool, float | None, bool]:
    """Draft position i of a step whose output kept n drafts -> (accepted, reached by the verifier as the output
    sees it, the draw u compared there or None, shown in the token view: a cut step shows nothing past its cut)."""
    accepted = i < n
    reached = accepted or (i == n and not cut)
    u = uniforms[i] if uniforms is not None and reached else None
    return accepted, reached, u, accepted or not cut


def lean_record(index, draft: Draft, draft_ids: list[int], logits, verdict, kept: list[int], detokenizer,
                draft_ms, verify_ms, elapsed_s, total_emitted) -> StepRecord:
    """Ids, kinds, decisions and timings; no probabilities, texts or top lists (detail=False)."""
    gamma = len(draft_ids)
    n, cut = accepted_in_output(verdict.n_accepted, kept)
    nan, no_top = float("nan"), TopTokens(ids=[], probs=[])
    positions, tokens = [], []
    for i, token_id in enumerate(draft_ids):
        accepted, reached, u, shown = position_state(i, n, cut, verdict.uniforms)
        positions.append(DraftPosition(token_id=token_id, text="", q=None, p=nan,
                                       accept_prob=verdict.accept_probs[i], u=u, accepted=accepted,
                                       reached=reached, p_top=no_top, q_top=None))
        if shown:
            tokens.append(TokenRecord(id=token_id, text="", step=index,
                                      kind=TokenKind.ACCEPTED if accepted else TokenKind.REJECTED))
    kind = TokenKind.TARGET if gamma == 0 else TokenKind.BONUS if verdict.n_accepted == gamma else TokenKind.RESAMPLED
    next_token = TokenRecord(id=verdict.next_token, text="", kind=kind, step=index)
    if not cut:
        tokens.append(next_token)
    return StepRecord(
        index=index, gamma=gamma, positions=positions, n_accepted=n, next_token=next_token, next_top=no_top,
        tokens=tokens, draft_ms=draft_ms, verify_ms=verify_ms, elapsed_s=elapsed_s,
        emitted=len(kept), total_emitted=total_emitted,
    )


@dataclasses.dataclass
class StepFigures:
    """What a detailed record shows of a step's distributions, read from the device."""
    p_of: list[float]  # the target's probability of each draft token
    q_of: list  # the drafter's (None for a lookup)
    p_tops: list[TopTokens]  # the target's top tokens before each draft token (and after the last)
    q_tops: list  # the drafter's (None for a lookup)
    next_top: TopTokens  # where the next token is drawn from
    next_p: float  # the target's probability of the next token


def detailed_record(index, draft_ids: list[int], verdict, kept: list[int], detokenizer, figures: StepFigures,
                    draft_ms, verify_ms, elapsed_s, total_emitted) -> StepRecord:
    """A step's record with detail (the app's): every position's figures and token texts."""
    gamma = len(draft_ids)
    n, cut = accepted_in_output(verdict.n_accepted, kept)
    p_of, q_of, p_tops, q_tops = figures.p_of, figures.q_of, figures.p_tops, figures.q_tops
    positions, tokens = [], []
    for i, token_id in enumerate(draft_ids):
        accepted, reached, u, shown = position_state(i, n, cut, verdict.uniforms)
        text = detokenizer.push(token_id) if accepted else detokenizer.peek(token_id)
        positions.append(DraftPosition(
            token_id=token_id, text=text, q=q_of[i], p=p_of[i], accept_prob=verdict.accept_probs[i],
            u=u, accepted=accepted, reached=reached, p_top=p_tops[i], q_top=q_tops[i],
        ))
        if shown:
            tokens.append(TokenRecord(
                id=token_id, text=text, kind=TokenKind.ACCEPTED if accepted else TokenKind.REJECTED,
                step=index, p=p_of[i], q=q_of[i], accept_prob=verdict.accept_probs[i], u=u,
            ))

    kind = TokenKind.TARGET if gamma == 0 else TokenKind.BONUS if verdict.n_accepted == gamma else TokenKind.RESAMPLED
    next_token = TokenRecord(id=verdict.next_token, text="", kind=kind, step=index, p=figures.next_p)
    if not cut:
        next_token.text = detokenizer.push(verdict.next_token)
        tokens.append(next_token)
    return StepRecord(
        index=index, gamma=gamma, positions=positions, n_accepted=n, next_token=next_token,
        next_top=figures.next_top, tokens=tokens, draft_ms=draft_ms, verify_ms=verify_ms, elapsed_s=elapsed_s,
        emitted=len(kept), total_emitted=total_emitted,
    )


def figures_of(detail, n: int) -> StepFigures:
    """A greedy step's figures from the device loop's StepDetail (device_loop.py), n drafts accepted in the
    output: the drafter's where it has them (a model's chain), else None, as for a lookup on the host; the next
    token is the target's argmax, so its probability is the top one at row n."""
    tops, gamma = detail.tops, len(detail.p_drafts)
    return StepFigures(p_of=detail.p_drafts, q_of=detail.q_drafts or [None] * gamma, p_tops=tops,
                       q_tops=detail.q_tops or [None] * gamma, next_top=tops[n], next_p=tops[n].probs[0])


def keep_tokens(new_ids: list[int], output: list[int], max_new_tokens: int, eos_ids) -> list[int]:
    """Appends to output what a step keeps of new_ids: up to max_new_tokens in all, and up to an EOS."""
    kept = []
    for token_id in new_ids:
        if len(output) >= max_new_tokens:
            break
        kept.append(token_id)
        output.append(token_id)
        if token_id in eos_ids:
            break
    return kept


def _top(probs: torch.Tensor, n: int = TOP_N) -> list[TopTokens]:
    """probs [N, V] -> the n most probable tokens of each row."""
    values, ids = torch.topk(probs, min(n, probs.shape[-1]), dim=-1)
    return [TopTokens(ids=i, probs=v) for i, v in zip(ids.tolist(), values.tolist())]


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


class RunProgress:
    """What a run holds while it runs: the accepted sequence twice, on the host (what the loop decides with) and
    on the device (what proposers read: a view of one buffer that grows by writing, never by concatenating),
    the output, the tokens shown, and the run's clock."""

    def __init__(self, prompt_ids: list[int], max_new_tokens: int, device: torch.device, start: float, eos_ids,
                 detokenizer: IncrementalDetokenizer, generator: torch.Generator):
        self.sequence = list(prompt_ids)
        size = len(self.sequence) + max_new_tokens + 1
        # the host side of every copy into the buffer: on a GPU pinned memory, so that a step's copy runs
        # asynchronously (a plain copy from the host waited ~40 us a step); each slot is written once
        self.staging = torch.empty(size, dtype=torch.long, pin_memory=device.type == "cuda")
        self.staged = self.staging.numpy()
        self.staged[: len(self.sequence)] = self.sequence
        self.buffer = self.staging if device.type == "cpu" else torch.empty(size, dtype=torch.long, device=device)
        if self.buffer is not self.staging:
            self.buffer[: len(self.sequence)].copy_(self.staging[: len(self.sequence)])
        self.output: list[int] = []
        self.shown: list[TokenRecord] = []
        self.start, self.eos_ids, self.detokenizer, self.generator = start, eos_ids, detokenizer, generator
        self.prefill_seconds = 0.0
        self.prefill_events = None  # (start, end) CUDA events where the prefill is timed on the device
        self.prompt_hidden = None  # the target's hidden states over the prompt but its last token (the prefill's)
        self.stop_reason = "max_new_tokens"

    @property
    def tokens(self) -> torch.Tensor:
        """The accepted sequence on the device."""
        return self.buffer[: len(self.sequence)]

    def append(self, kept: list[int]) -> None:
        """Accepted tokens onto both copies of the sequence (the device's asynchronously)."""
        begin, end = len(self.sequence), len(self.sequence) + len(kept)
        self.staged[begin:end] = kept
        if self.buffer is not self.staging:
            self.buffer[begin:end].copy_(self.staging[begin:end], non_blocking=True)
        self.sequence.extend(kept)


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
        self.runner = runner or make_runner(target.model, options=self.options)
        if self.settings.tree and not proposer.drafts_trees:
            if proposer.drafts:  # plain decoding drafts nothing: nothing to say
                warnings.warn(f"specviz: {proposer.name} drafts chains; draft trees are for ngram, retrieval, medusa, eagle "
                              "and adaptive on medusa or eagle")
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
            run.stop_reason = yield from self._run_on_device(loop, run)
        while loop is None and len(run.output) < self.settings.max_new_tokens:
            yield self._host_step(run)
            if run.stop_reason == "eos":
                break
        self.result = self._finish(run, "host" if loop is None else "device")

    def _prefill(self, timed_by_events: bool) -> "RunProgress":
        """The prompt into the target's cache (all of it but its last token: each step feeds the last one) and
        the proposer reset. timed_by_events: the device loop's steps queue behind the prefill, so it is timed by
        CUDA events rather than waited for."""
        settings, runner, device = self.settings, self.runner, self.runner.device
        start = device_clock(device)
        events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if timed_by_events else None
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

    def _host_step(self, run: "RunProgress") -> StepRecord:
        """One step on the host: draft, verify, keep what was accepted, tell the proposer, record."""
        settings, runner, proposer, device = self.settings, self.runner, self.proposer, self.runner.device
        step_start = time.perf_counter()
        draft, draft_ids = self._draft(run)
        # the device is waited for only where a step's timing needs it: drafting that runs on the host (lookups)
        # is timed by the host clock alone, and a verify pass has ended once its result has been read
        draft_end = time.perf_counter() if proposer.drafts_on_host else device_clock(device)

        cached = runner.length
        tree_size = 0
        if draft.parents is not None and not trees.is_chain(draft.parents):
            tree_size = len(draft_ids)
            draft, draft_ids, logits, hidden, verdict = self._verify_tree(draft, draft_ids, run.sequence[-1],
                                                                          run.generator)
        else:
            # the last accepted token and the drafts, built on the host: one copy to the device
            logits, hidden = runner.forward(torch.tensor([run.sequence[-1], *draft_ids], dtype=torch.long))  # [g + 1, V]
            if settings.greedy:
                verdict = verification.verify_greedy(torch.tensor(draft_ids, dtype=torch.long), logits)
            else:
                verdict = self.verify_sampled(draft.token_ids.to(device), draft.probs,
                                              warp_probs(logits, settings), run.generator)
            runner.rollback(cached + 1 + verdict.n_accepted)  # keep the fed token and the accepted drafts
        verify_end = time.perf_counter()
        n = verdict.n_accepted

        kept = keep_tokens(draft_ids[:n] + [verdict.next_token], run.output, settings.max_new_tokens, run.eos_ids)
        if kept and kept[-1] in run.eos_ids:
            run.stop_reason = "eos"
        run.append(kept)
        self.tokens = run.tokens
        proposer.observe(Feedback(
            tokens=run.tokens, drafted=draft.size, n_accepted=n,
            draft_seconds=draft_end - step_start, verify_seconds=verify_end - draft_end,
            target_hidden=(hidden if tree_size else hidden[: n + 1]) if proposer.needs_target_hidden else None,
            new_ids=kept,
        ))

        make_record = self._record if self.detail else lean_record
        record = make_record(len(self.steps), draft, draft_ids, logits, verdict, kept, run.detokenizer,
                             (draft_end - step_start) * 1e3, (verify_end - draft_end) * 1e3,
                             time.perf_counter() - run.start, len(run.output))  # no sync: the next step's has it
        record.tree_size, record.doubted = tree_size, draft.doubted
        self.steps.append(record)
        run.shown.extend(record.tokens)
        return record

    def _draft(self, run: "RunProgress") -> tuple[Draft, list[int]]:
        """The proposer's draft for this step: up to gamma tokens, fewer near the token limit or the context's
        end; a tree cut to what the cache can still hold."""
        settings, proposer, context = self.settings, self.proposer, self.context
        room = min(settings.max_new_tokens - len(run.output) - 1, context - len(run.sequence) - 1)
        gamma = min(settings.gamma, room)
        draft = proposer.propose(run.tokens, gamma) if gamma > 0 else proposer.empty_draft(self.runner.device)
        draft_ids = draft.token_ids.tolist()
        if draft.parents is None:
            assert draft.size <= gamma, f"{proposer.name} proposed {draft.size} tokens, more than gamma={gamma}"
            return draft, draft_ids
        assert max(trees.depths(draft.parents), default=0) <= gamma and draft.size <= max(settings.tree, gamma), \
            f"{proposer.name} proposed a tree deeper than gamma={gamma} or larger than tree={settings.tree}"
        fits = context - len(run.sequence)  # the verify pass writes the root and every node into the cache
        if draft.size > fits:  # near the end of the context: the first nodes are a tree too
            draft = Draft(draft.token_ids[:fits], None, None, draft.parents[:fits])
            draft_ids = draft_ids[:fits]
        return draft, draft_ids

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
                      "loop": loop},
            stop_reason=run.stop_reason,
        )

    def _device_loop(self):
        """A DeviceLoop (device_loop.py) for this run where one applies, its graphs captured; None otherwise
        (and when capturing fails: the host loop then runs, with a warning)."""
        residual = verification.ON_DEVICE.get(self.verify_sampled)  # a verifier planted by a test: on the host
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

    def _run_on_device(self, loop, run: "RunProgress"):
        """The host loop's records and output from a DeviceLoop's steps. Returns the stop reason."""
        settings = self.settings
        for outcome in loop.steps(run.tokens, settings.max_new_tokens, run.prompt_hidden, settings,
                                  run.generator.initial_seed()):
            n, choices = outcome.n_accepted, outcome.choices
            accept_probs = outcome.accept_probs or [float(d == c) for d, c in zip(outcome.draft_ids, choices)]
            verdict = verification.Verdict(n_accepted=n, next_token=outcome.next_token, uniforms=outcome.uniforms,
                                           next_distribution=None, accept_probs=accept_probs)
            kept = keep_tokens(outcome.draft_ids[:n] + [verdict.next_token], run.output, settings.max_new_tokens,
                               run.eos_ids)
            run.sequence.extend(kept)  # the device holds its own copy: no staging
            timing = (outcome.draft_ms, outcome.verify_ms, time.perf_counter() - run.start, len(run.output))
            if outcome.detail is None:
                record = lean_record(len(self.steps), None, outcome.draft_ids, None, verdict, kept, None, *timing)
            else:
                figures = figures_of(outcome.detail, accepted_in_output(n, kept)[0])
                record = detailed_record(len(self.steps), outcome.draft_ids, verdict, kept, run.detokenizer,
                                         figures, *timing)
            record.tree_size, record.doubted = outcome.tree_size, outcome.doubted
            self.steps.append(record)
            run.shown.extend(record.tokens)
            yield record
            if kept and kept[-1] in run.eos_ids:
                return "eos"
            if len(run.output) >= settings.max_new_tokens:
                break
        return "max_new_tokens"

    def _verify_tree(self, draft: Draft, node_ids: list[int], last_token: int, generator):
        """Verify a draft tree in one forward, keep the accepted path in the cache, and return what a chain
        step returns, seen along the path (tree.py): (the drafted line shown: the accepted path, then the
        drafter's favourite line below where it stopped; its ids; the target's logits at the rows before
        each of its tokens and after the last [g + 1, V]; hidden states of the root and the path; verdict)."""
        runner, settings, parents = self.runner, self.settings, draft.parents
        cached = runner.length
        logits, hidden = runner.forward([last_token, *node_ids], parents=parents)
        if settings.greedy:
            choices = logits.argmax(-1).tolist()
            walk = trees.walk_greedy(node_ids, parents, choices)
        else:
            probs = warp_probs(logits, settings)
            walk = trees.walk_sampled(node_ids, parents, probs, generator)
        path = walk.path
        runner.keep_nodes(cached + 1, [cached + 1 + node for node in path])
        line = path + trees.first_child_chain(parents, path[-1] if path else -1)
        rows = [0] + [node + 1 for node in line]  # row i scores line[i] (its parent's row); the last, after it
        tried = {node: (accept, u) for node, accept, u in walk.tried}
        accept_probs, uniforms = [], []
        for node, row in zip(line, rows):
            if node in tried:
                accept, u = tried[node]
            else:  # below where the walk stopped: never looked at; shown as the verifier would have judged it
                accept = float(choices[row] == node_ids[node]) if settings.greedy else float(probs[row, node_ids[node]])
                u = None
            accept_probs.append(accept)
            uniforms.append(u if u is not None else float("nan"))
        verdict = verification.Verdict(
            n_accepted=len(path), next_token=walk.next_token, accept_probs=accept_probs,
            uniforms=None if settings.greedy else uniforms, next_distribution=walk.next_distribution)
        line_ids = [node_ids[node] for node in line]
        shown = Draft(torch.tensor(line_ids, dtype=torch.long), None)  # on the host, where it is read
        if not self.detail and not self.proposer.needs_target_hidden:
            return shown, line_ids, None, None, verdict  # nobody reads the rows: no gathers on the device
        # the logits' rows, then the hidden states' (the root and the path): one copy to the device
        picks = torch.tensor(rows + [0] + [node + 1 for node in path], dtype=torch.long).to(logits.device)
        return shown, line_ids, logits[picks[:len(rows)]], hidden[picks[len(rows):]], verdict

    def _record(self, index, draft: Draft, draft_ids: list[int], logits, verdict, kept: list[int], detokenizer,
                draft_ms, verify_ms, elapsed_s, total_emitted) -> StepRecord:
        settings = self.settings
        gamma = draft.size
        n = accepted_in_output(verdict.n_accepted, kept)[0]
        p_shown = display_probs(logits, settings)  # [g + 1, V]
        q_shown = None
        if draft.probs is not None:
            q_shown = display_probs(draft.logits, settings) if settings.greedy and draft.logits is not None else draft.probs
        def of_draft(probs: torch.Tensor) -> list[float]:  # probs[i, x_i] for each draft token
            rows = torch.arange(gamma, device=probs.device)
            return probs[rows, torch.tensor(draft_ids, dtype=torch.long, device=probs.device)].tolist()

        # greedy draws from a one-hot; show the target's softmax instead
        next_top = _top((p_shown[n] if settings.greedy else verdict.next_distribution).unsqueeze(0))[0]
        figures = StepFigures(p_of=of_draft(p_shown) if gamma else [],
                              q_of=of_draft(q_shown) if gamma and q_shown is not None else [None] * gamma,
                              p_tops=_top(p_shown), q_tops=_top(q_shown) if q_shown is not None else [None] * gamma,
                              next_top=next_top, next_p=float(p_shown[n, verdict.next_token]))
        return detailed_record(index, draft_ids, verdict, kept, detokenizer, figures, draft_ms, verify_ms,
                               elapsed_s, total_emitted)

