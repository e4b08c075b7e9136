"""The library's front door: pick a method by name, run a prompt, compare with plain decoding.

    from specviz import generate
    report = generate("Explain KV caches.", method="ngram", compare_plain=True)
    report.result.metrics.mean_accepted_length, report.speedup
"""
from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .engine.batch_draft import ModelDrafting
from .engine.device_loop import DeviceLoop
from .engine.run import SpeculativeRun
from .runners.graphs import check_capture_deadline
from .runners.static import make_runner
from .errors import MissingDrafterError
from .models.loading import DEFAULT_MODEL, LoadedModel, check_same_vocabulary, default_source, load_model
from .models.random_target import is_random_target
from .options import EngineOptions
from .records.oracle import run_oracle
from . import methods
from .methods import DRAFT_MODEL, check_batchable  # noqa: F401  (check_batchable: re-exported, the registry's)
from .proposers import PlainProposer, Proposer, ProposerRequest
from .proposers.checkpoints import load_draft_model
from .proposers.distilled import DISTILLED  # noqa: F401  (re-exported: the shipped draft model's name)
from .proposers.early_exit import decoder_layers, default_exit_layer, truncated_view
from .rule.theory import best_gamma, expected_speedup, expected_tokens_per_step  # noqa: F401  (re-exported)
from .records.schema import RunResult, StepRecord, TopTokens
from .settings import DecodeSettings, check_prompt_text
from .engine.step_records import TOP_N


def check_drafter(method: str, draft) -> None:
    """The one check that a method has the drafter model it needs: a method that needs a draft model
    (methods.DRAFT_MODEL: `draft`, which drafts with a separate model) needs one. draft: a loaded model or its
    name, before anything is loaded; None or "": none chosen."""
    if DRAFT_MODEL in methods.method(method).needs and not draft:
        raise MissingDrafterError(f"the {method} method needs a draft model: choose one ('default', a Hub id, a folder "
                                  "or a .gguf file: --draft on the command line, draft= in the API, the drafter list "
                                  "in the app)")


def make_proposer(
    method: str,
    target: LoadedModel,
    draft: LoadedModel | None = None,
    exit_layer: int | None = None,
    adaptive_base: str = "auto",
    heads: str | None = None,
    adaptive_lookup: str = "auto",
    options: EngineOptions | None = None,
) -> Proposer:
    """A fresh proposer for `method`, built by its registered builder (specviz.methods). `draft` is the drafter
    model for `draft` (and for `adaptive`'s base); `heads` the trained drafter for `medusa` and `eagle`, the
    datastore for `retrieval` (folder or Hub id; None = the one shipped for the default target).
    `adaptive_lookup`: what `adaptive` looks up beside a model drafter, "ngram" (the sequence), "retrieval" (the
    sequence and the datastore) or "auto" (default_lookup). options: the engine's switches for the drafter's own
    runners and graphs (None: from the environment)."""
    entry = methods.method(method)  # an unknown name is refused here, with the names there are
    options = options or EngineOptions.from_environment()
    check_drafter(method, draft)

    def another(name: str) -> Proposer:
        return make_proposer(name, target, draft, exit_layer, heads=heads, options=options)

    return entry.builder()(ProposerRequest(target, draft, exit_layer, heads, adaptive_base, adaptive_lookup, options,
                                           another))


def batch_drafting(method: str, target: LoadedModel, draft: LoadedModel | None = None,
                   exit_layer: int | None = None, heads: str | None = None) -> Callable[[], Proposer] | ModelDrafting:
    """What batch.decode_batch drafts with for `method`: a draft model for the whole batch (`draft`,
    `early-exit`), else a factory of one lookup proposer a row."""
    check_batchable(method)
    if method == "early-exit":
        layers = len(decoder_layers(target.model))
        cut = default_exit_layer(layers) if exit_layer is None else exit_layer
        return ModelDrafting(truncated_view(target.model, cut), target.vocab_size)
    if method == "draft":
        check_drafter(method, draft)
        check_same_vocabulary(target, draft)
        return ModelDrafting(draft.model, target.vocab_size)
    return lambda: make_proposer(method, target, heads=heads)


def encode(target: LoadedModel, prompt: str, chat: bool = True) -> list[int]:
    check_prompt_text(prompt)
    return target.encode_prompt(prompt, chat=chat)


_warmed: set[int] = set()


def warm_up(target: LoadedModel, max_positions: int = 5, max_length: int = 1024, proposers=(), tree: int = 0,
            device_loop: bool = False, detail: bool = False, options: EngineOptions | None = None,
            runs: int = 1) -> None:
    """Untimed work before anything is measured: one short run per model (allocator, kernels, lazy
    imports), and on the fast path the CUDA graphs (and compiled kernels) for forwards of up to
    `max_positions` positions in sequences of up to `max_length` tokens, for the target and for the
    runners of the given proposers (and with tree > 0 the target's for draft trees of up to `tree` tokens, and
    the proposers' own: EAGLE's tree drafting at gamma = max_positions - 1).
    With device_loop, also the device loop's graphs for plain decoding and the proposers where it applies
    (device_loop.py), for records without detail (the bench's) or with it (detail: the app's), and then not the
    host-side graphs of those proposers, which their runs never replay. Graphs already
    captured are kept, so calling it again is cheap. options: the runs' EngineOptions (None: from the
    environment). runs: how many runs will hold a target runner at once (the app's run and its plain baseline:
    2); each holds a workspace of its own, and each workspace is prepared, so that no run captures while timed.
    Stops with runners.graphs.CaptureDeadline between captures where its thread's deadline passes."""
    options = options or EngineOptions.from_environment()
    check_capture_deadline()
    if id(target.model) not in _warmed:
        ids = [1 + i % (target.vocab_size - 1) for i in range(8)]  # any 8 ids of the vocabulary, however small
        for _ in SpeculativeRun(target, PlainProposer(), ids, DecodeSettings(max_new_tokens=4, stop_at_eos=False),
                                options=options):
            pass
        _warmed.add(id(target.model))
    runners = []
    try:
        on_device = set()  # proposers whose runs draft on the device loop: their host-side graphs are never replayed
        for _ in range(max(1, runs)):  # held together: each takes a workspace of its own
            # a runner for each kind of hidden states the runs read (SpeculativeRun makes them so), plain's first
            for features, group in by_target_layers([PlainProposer(), *proposers]):
                runner = make_runner(target.model, options=options, features=features)
                runners.append(runner)
                for proposer in group if device_loop else ():  # first: they reserve the most cache
                    check_capture_deadline()
                    loop = DeviceLoop.for_run(runner, proposer,
                                              DecodeSettings(max_new_tokens=1, gamma=max(1, max_positions - 1),
                                                             tree=tree),
                                              detail_top=TOP_N if detail else 0, prompt_length=0, options=options)
                    if loop is not None:
                        loop.prepare(max_length)
                        on_device.add(id(proposer))
                check_capture_deadline()
                runner.warm_up(max_positions, max_length, tree)  # only the target verifies draft trees
        for proposer in (p for p in proposers if id(p) not in on_device):
            for each in proposer.runners():
                check_capture_deadline()
                each.warm_up(max_positions, max_length)
            check_capture_deadline()
            proposer.warm_up(max_length, max_positions - 1, tree)  # what it captures itself (EAGLE's tree drafting)
    finally:
        for runner in runners:
            runner.release()


def by_target_layers(proposers: list[Proposer]) -> list[tuple[tuple[int, ...] | None, list[Proposer]]]:
    """The proposers grouped by the target layers they read (Proposer.target_layers), in the order first met."""
    groups: dict = {}
    for proposer in proposers:
        groups.setdefault(proposer.target_layers, []).append(proposer)
    return list(groups.items())


def run_once(target: LoadedModel, proposer: Proposer, prompt_ids: list[int], settings: DecodeSettings,
             prompt_text: str = "", detail: bool = True, options: EngineOptions | None = None) -> RunResult:
    run = SpeculativeRun(target, proposer, prompt_ids, settings, prompt_text=prompt_text, detail=detail,
                         options=options)
    for _ in run:
        pass
    return run.result


def weights_come_from(name: str) -> str:
    """Where a load of `name` gets its weights: "made" (random weights of a stated shape, built here), "here" (a
    file or folder on this machine, the offline default model or the shipped distilled drafter) or "hub" (a Hub
    id: a first load downloads it)."""
    if is_random_target(name):
        return "made"
    if name == DISTILLED:  # shipped in assets/drafters
        return "here"
    try:
        source = default_source() if name == DEFAULT_MODEL else name
    except Exception:  # the load itself will say what is missing
        return "here"
    return "here" if Path(source).exists() else "hub"


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two outputs differ; None when they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def distribution_at(steps: list[StepRecord], index: int) -> TopTokens | None:
    """The target's most probable tokens where output token `index` was chosen, from a run's detailed records
    (a drafted position's p_top, or the step's next_top); None past the output or where the records are lean."""
    for step in steps:
        start = step.total_emitted - step.emitted
        if start <= index < step.total_emitted:
            offset = index - start
            top = step.positions[offset].p_top if offset < step.n_accepted else step.next_top
            return top if len(top.probs) >= 2 else None
    return None


def logit_margin(steps: list[StepRecord], index: int) -> float | None:
    """How far apart the target's two largest logits were where a greedy run chose output token `index`: a
    greedy record's top tokens are the softmax of the logits (sampling.display_probs), in which p1 / p2 =
    exp(l1 - l2), so the margin is ln(p1 / p2). inf where p2 underflowed to 0; None where it was not recorded."""
    top = distribution_at(steps, index)
    if top is None:
        return None
    first, second = top.probs[0], top.probs[1]
    if not first > 0:
        return None
    return math.log(first / second) if second > 0 else math.inf


@dataclass
class Report:
    result: RunResult
    plain: RunResult | None = None

    @property
    def speedup(self) -> float | None:
        """Plain wall time over speculative wall time, same prompt, same settings, same process."""
        if self.plain is None or self.result.metrics.wall_seconds <= 0:
            return None
        return self.plain.metrics.wall_seconds / self.result.metrics.wall_seconds

    @property
    def first_difference(self) -> int | None:
        return None if self.plain is None else first_difference(self.result.token_ids, self.plain.token_ids)

    @property
    def first_difference_margin(self) -> float | None:
        """Greedy runs that differ: the margin of plain's two largest logits at the first difference (a near-tie
        that rounding can flip, or not: logit_margin); None otherwise or where it was not recorded (or was too
        wide to record: beyond float32's softmax)."""
        index = self.first_difference
        if index is None or self.identical_to_plain is not False:
            return None
        margin = logit_margin(self.plain.steps, index)
        return margin if margin is not None and math.isfinite(margin) else None

    @property
    def identical_to_plain(self) -> bool | None:
        """For greedy runs: is the output token-for-token plain greedy output? None when sampling."""
        if self.plain is None or self.result.settings.get("temperature", 0) != 0:
            return None
        return self.first_difference is None

    def to_dict(self, include_steps: bool = True) -> dict:
        out = self.result.to_dict(include_steps=include_steps)
        if self.plain is not None:
            out["plain"] = {
                "text": self.plain.text,
                "wall_seconds": self.plain.metrics.wall_seconds,
                "tokens_per_second": self.plain.metrics.tokens_per_second,
                "new_tokens": self.plain.metrics.new_tokens,
            }
            out["speedup"] = self.speedup
            out["identical_to_plain"] = self.identical_to_plain
            out["first_difference"] = self.first_difference
            out["first_difference_margin"] = self.first_difference_margin
        # the oracle drafter beside this one and the accepted-length histogram (oracle.py)
        out["oracle"] = run_oracle(self.result, self.plain.metrics.wall_seconds if self.plain else None).to_dict()
        return out


def resolve_models(target, draft, device=None, dtype=None, device_map=None, max_memory=None, draft_device=None
                   ) -> tuple[LoadedModel, LoadedModel | None]:
    """Names (or loaded models) -> loaded target and drafter; the drafter sits on one device."""
    target_model = target if isinstance(target, LoadedModel) else load_model(target, device, dtype, device_map,
                                                                             max_memory)
    draft_model = draft if isinstance(draft, LoadedModel) or draft is None else \
        load_draft_model(draft, target_model, draft_device or str(target_model.device), dtype)
    return target_model, draft_model


def generate(
    prompt: str,
    method: str = "ngram",
    target: str | LoadedModel = DEFAULT_MODEL,
    draft: str | LoadedModel | None = None,
    settings: DecodeSettings | None = None,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    chat: bool = True,
    exit_layer: int | None = None,
    compare_plain: bool = False,
    device_map: str | dict | None = None,
    max_memory: str | dict | None = None,
    draft_device: str | None = None,
    heads: str | None = None,
    adaptive_lookup: str = "auto",
    options: EngineOptions | None = None,
) -> Report:
    settings = (settings or DecodeSettings()).validate()
    options = options or EngineOptions.from_environment()
    check_prompt_text(prompt)  # before loading anything
    target_model, draft_model = resolve_models(target, draft, device, dtype, device_map, max_memory, draft_device)
    proposer = make_proposer(method, target_model, draft_model, exit_layer, heads=heads,
                             adaptive_lookup=adaptive_lookup,
                             options=options)
    prompt_ids = encode(target_model, prompt, chat)
    warm_up(target_model, settings.gamma + 1,  # the graphs these runs replay, before they are timed
            min(len(prompt_ids) + settings.max_new_tokens + settings.tree + 1, target_model.context_length),
            [proposer], tree=settings.tree, options=options)
    plain = run_once(target_model, PlainProposer(), prompt_ids, settings, prompt,
                     options=options) if compare_plain else None
    return Report(run_once(target_model, proposer, prompt_ids, settings, prompt, options=options), plain)
