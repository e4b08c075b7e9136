"""Lesson 6, what each drafter costs: what a loaded drafter holds beyond the target's own weights (parameters and
memory, measured from the objects), beside its acceptance on one prompt."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..api import make_proposer
from ..measure.floor import weight_bytes
from ..models.loading import LoadedModel
from .. import methods as registry
from ..proposers import Proposer
from ..proposers.checkpoints import load_draft_model, shipped_methods
from ..proposers.distilled import DISTILLED
from ..settings import DecodeSettings
from .common import PROMPTS, megabytes, prompt_ids, run_once
from .lesson import Lesson

CLAIM = ("Drafters differ in what they add to memory: a second model, extra heads, a layer, a datastore, or nothing. "
         "Measured from the loaded objects.")
HEADERS = ["method", "extra parameters", "extra memory", "share of the target's memory", "α", "τ", "drafting ms a step"]
SHIPPED_AS = {DISTILLED: "draft"}  # a shipped folder named otherwise than the method that uses it


def offline_methods(target: LoadedModel, shipped: Sequence[str] | None = None) -> list[str]:
    """The drafters that load here without a network or a second model: those that need nothing, and those
    whose files ship for this target (specviz.proposers.checkpoints.shipped_methods), in the registry's order."""
    shipped = shipped_methods(target) if shipped is None else shipped
    available = set(needs_nothing()) | {SHIPPED_AS.get(name, name) for name in shipped}
    return [m.name for m in registry.methods() if m.name in available]


def needs_nothing() -> tuple[str, ...]:
    """The drafters made of the sequence or of the target itself: no files (specviz.methods), nothing beneath."""
    return tuple(m.name for m in registry.methods() if m.drafts and not m.needs and not m.on_another)


def offline_proposer(method: str, target: LoadedModel) -> Proposer:
    """The method's proposer with what ships for the target: `draft` drafts with the distilled draft model."""
    draft = load_draft_model(DISTILLED, target) if method == "draft" else None
    return make_proposer(method, target, draft)


_SKIP = {"runners", "cache", "trees", "tree_workspaces", "_finalizer", "target", "sequence", "cached_ids",
         "pending", "last_hidden", "head_feature"}  # run state, not the drafter itself


def _address(t: torch.Tensor):
    """Where a tensor's data starts and how long it is, so that one tensor held twice counts once while slices of
    one storage (fused weights) count each; a tensor without storage (a wrapper subclass) by its identity."""
    try:
        return ("torch", t.data_ptr(), t.numel())
    except (RuntimeError, NotImplementedError):
        return ("object", id(t))


def _storage(t: torch.Tensor):
    """The storage a tensor views: a slice of the target's weights shares it, and costs nothing extra."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _drafter_part(name: str, value):
    """A runner's model is the drafter's; its caches and prepared copies are run state."""
    return getattr(value, "model", None) if name == "runner" else value


def _collect(obj, out: dict, depth: int = 0) -> None:
    """Every tensor and array an object holds, by storage (address -> (bytes, floating-point numbers)), walking
    attributes, lists and dicts."""
    if depth > 6 or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return
    if isinstance(obj, torch.nn.Module):
        for t in obj.parameters():
            _collect(t, out, depth + 1)
        for t in obj.buffers():  # memory, not parameters (rotary tables and the like)
            out.setdefault(_address(t), (t.numel() * t.element_size(), 0, _storage(t)))
        return
    if isinstance(obj, torch.Tensor):
        storage = _storage(obj)  # None: an opaque prepacked copy (oneDNN) of weights counted already: memory only
        numbers = obj.numel() if obj.is_floating_point() and storage is not None else 0
        out.setdefault(_address(obj), (obj.numel() * obj.element_size(), numbers, storage))
        return
    if isinstance(obj, np.ndarray):
        out.setdefault(("numpy", obj.__array_interface__["data"][0]), (obj.nbytes, 0, None))
        return
    if isinstance(obj, dict):
        for value in obj.values():
            _collect(value, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _collect(value, out, depth + 1)
    elif hasattr(obj, "__dict__"):
        for name, value in vars(obj).items():
            if name not in _SKIP:
                _collect(_drafter_part(name, value), out, depth + 1)


def _extra(proposer: Proposer, target: LoadedModel) -> list[tuple[int, int]]:
    """(bytes, parameters) of each tensor or array the proposer holds outside the target's storages."""
    held: dict = {}
    _collect(proposer, held)
    shared = {_storage(t) for t in [*target.model.parameters(), *target.model.buffers()]} - {None}
    return [(size, numbers) for size, numbers, storage in held.values() if storage is None or storage not in shared]


def extra_bytes(proposer: Proposer, target: LoadedModel) -> int:
    """Memory the drafter holds beyond the target's own weights (what it shares with the target is free):
    weights, heads, a datastore's arrays."""
    return sum(b for b, _ in _extra(proposer, target))


def extra_parameters(proposer: Proposer, target: LoadedModel) -> int:
    """Floating-point numbers the drafter holds that are not the target's: its weights, whether in modules or
    in plain tensors (a head's copy of part of the output layer)."""
    return sum(n for _, n in _extra(proposer, target))


@dataclass
class DrafterCost:
    method: str
    parameters: int  # beyond the target's
    bytes: int  # beyond the target's: weights, heads, datastore arrays
    target_parameters: int
    target_bytes: int
    alpha: float | None  # on one prompt, greedy
    tau: float
    draft_ms: float | None = None  # drafting, ms a step on that prompt (None: a record saved before it was kept)


def drafter_costs(target: LoadedModel, methods: Sequence[str] | None = None, prompt: str = PROMPTS["code"],
                  gamma: int = 4, max_new_tokens: int = 32,
                  make: Callable[[str], Proposer] | None = None) -> Iterator[list[DrafterCost]]:
    """Per method (default: every drafter that loads offline for this target): what the loaded drafter adds to
    memory, and its acceptance on one prompt."""
    methods = offline_methods(target) if methods is None else methods
    make = make or (lambda method: offline_proposer(method, target))
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0, stop_at_eos=False).validate()
    ids = prompt_ids(target, prompt, True)
    target_params = sum(p.numel() for p in target.model.parameters())
    target_bytes = weight_bytes(target.model)
    rows: list[DrafterCost] = []
    for method in methods:
        proposer = make(method)
        params, size = extra_parameters(proposer, target), extra_bytes(proposer, target)
        result = run_once(target, proposer, ids, settings, prompt, detail=False)
        metrics = result.metrics
        rows.append(DrafterCost(result.method, params, size, target_params, target_bytes, metrics.acceptance_rate,
                                metrics.mean_accepted_length, 1e3 * metrics.draft_seconds / max(metrics.steps, 1)))
        yield list(rows)


def drafter_rows(rows: list[DrafterCost]) -> list[list]:
    return [[r.method, f"{r.parameters:,}", megabytes(r.bytes), f"{100 * r.bytes / r.target_bytes:.1f}%",
             "–" if r.alpha is None else round(r.alpha, 2), round(r.tau, 2),
             "–" if r.draft_ms is None else round(r.draft_ms, 2)] for r in rows]


def base_method(label: str) -> str:
    """'dflash:4' -> 'dflash': a row's method as the registry names it."""
    return label.split(":")[0].split("@")[0]


def at_once_sentence(rows: list[DrafterCost]) -> str:
    """What parallel drafting changes: the drafter that writes the whole draft in one forward (the registry's
    drafts_at_once) with the most tokens a forward, beside the one with the most that writes it a forward a
    token, both measured on this prompt."""
    entries = {r.method: registry.method(base_method(r.method)) for r in rows
               if r.draft_ms is not None and base_method(r.method) in registry.names()}
    at_once = [r for r in rows if r.method in entries and entries[r.method].drafts_at_once]
    one_by_one = [r for r in rows if r.method in entries and not entries[r.method].drafts_at_once
                  and not entries[r.method].lookup and r.draft_ms > 0]
    if not at_once or not one_by_one:
        return ""
    fast, slow = max(at_once, key=lambda r: r.tau), max(one_by_one, key=lambda r: r.tau)
    return (f"{fast.method} drafts the whole draft in one forward: {fast.draft_ms:.2f} ms a step, where "
            f"{slow.method}, one forward a token, takes {slow.draft_ms:.2f} ms; drafting in parallel makes a draft's "
            "cost hardly grow with its length, so what decides is how many drafts the target keeps (τ). ")


def drafter_sentence(rows: list[DrafterCost]) -> str:
    if not rows:
        return ""
    best = max(rows, key=lambda r: r.tau)
    share = lambda r: f"{100 * r.bytes / r.target_bytes:.1f}% of the target"  # noqa: E731
    nothing = [r.method for r in rows if r.bytes == 0]
    data_only = [r for r in rows if r.parameters == 0 and r.bytes > 0]
    text = (f"Target: {rows[0].target_parameters / 1e6:.0f}M parameters, {megabytes(rows[0].target_bytes)}. Most "
            "tokens "
            f"per forward: {best.method} (**τ {best.tau:.2f}**), for {megabytes(best.bytes)} extra ({share(best)}). ")
    if nothing:
        text += f"Nothing extra at all: {', '.join(nothing)}. "
    for r in data_only:
        text += f"{r.method} holds no weights but {megabytes(r.bytes)} of data ({share(r)}). "
    if not any(r.method == "draft" for r in rows):
        text += ("A separate draft model would add a whole model of its own (not measured here: none ships for this "
                 "target). ")
    text += at_once_sentence(rows)
    return text + ("Heads and a layer that read the target's own features add a fraction of the target, and a draft "
                   "model must be trained to agree with the target from tokens alone: this is why self-speculative "
                   "methods spread.")


SETTINGS = dict(prompt=PROMPTS["code"], method="eagle", gamma=4, temperature=0.0, max_new=32, seed=0)
LESSON = Lesson(6, "drafters", "What each drafter costs", "Drafters", CLAIM, drafter_costs, lambda r: HEADERS,
                drafter_rows, drafter_sentence, list[DrafterCost], settings=SETTINGS)
