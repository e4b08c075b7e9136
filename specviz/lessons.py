"""Measurements behind the Learn tab's lessons: small functions, records in and out, no UI imports, so that the
CLI, the API and a class notebook can run the same lessons.

Each lesson is a generator that yields its record as it grows (the last one yielded is the lesson's result):
a caller can draw progress and stop between two yields by closing the generator. `finish` runs one to its end.

    from specviz import lessons, load_model
    target = load_model("default")
    result = lessons.finish(lessons.distribution(target, "Once upon a time, there was a", runs=100))
    result.p_value, result.wrong_p_value

Every number comes from the model when the lesson runs; only LITERATURE is quoted, and says where from.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .api import first_difference, make_proposer, warm_up
from .cost_curve import CostPoint, measure_positions
from .engine import SpeculativeRun
from .exactness import Fit, next_token_probs, chi_square_p_value, goodness_of_fit
from .floor import memory_bandwidth, weight_bytes
from .models import LoadedModel
from .proposers import PlainProposer, Proposer
from .records import RunResult, StepRecord, TokenKind
from .settings import DecodeSettings
from .theory import expected_speedup
from .verify import verify_sampled_without_residual

SIGNIFICANCE = 0.01  # a p-value below it says "not the same distribution"


def _p_value(fit: Fit | None) -> float | None:
    return None if fit is None else fit.p_value


def finish(lesson: Iterable):
    """Runs a lesson generator to its end; its last record."""
    last = None
    for last in lesson:
        pass
    return last


def _run(target: LoadedModel, proposer: Proposer, prompt_ids: list[int], settings: DecodeSettings,
         prompt: str = "", detail: bool = True, verifier=None) -> RunResult:
    run = SpeculativeRun(target, proposer, prompt_ids, settings, prompt_text=prompt if isinstance(prompt, str) else "",
                         detail=detail, verifier=verifier)
    for _ in run:
        pass
    return run.result


def _prompt_ids(target: LoadedModel, prompt: str | list[int], chat: bool) -> list[int]:
    """A prompt as text, or already as token ids (the tiny test models have no tokenizer)."""
    return list(prompt) if isinstance(prompt, list) else target.encode_prompt(prompt, chat=chat)


def _text(target: LoadedModel, token: int) -> str:
    return target.tokenizer.decode([token]) if target.tokenizer is not None else str(token)


# lesson 1: the mechanic ---------------------------------------------------------------------------------------

@dataclass
class MechanicStep:
    index: int
    drafted: list[str]  # the drafter's guesses, in order
    accepted: int  # how many of them the target kept
    own_token: str  # the token the target wrote itself (resampled after a rejection, or the bonus)
    bought: int  # tokens this one target forward added to the output
    verify_ms: float


@dataclass
class Mechanic:
    method: str
    prompt: str
    result: RunResult | None
    steps: list[MechanicStep]
    tokens: list = field(default_factory=list)  # TokenRecords shown so far, rejected drafts included

    @property
    def forwards(self) -> int:
        return len(self.steps)

    @property
    def new_tokens(self) -> int:
        return sum(s.bought for s in self.steps)

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / self.forwards if self.forwards else 0.0


def mechanic_step(step: StepRecord) -> MechanicStep:
    return MechanicStep(step.index, [p.text for p in step.positions], step.n_accepted, step.next_token.text,
                        step.emitted, step.verify_ms)


def mechanic(target: LoadedModel, prompt: str | list[int], method: str = "eagle", gamma: int = 4, max_new_tokens: int = 24,
             chat: bool = True, proposer: Proposer | None = None) -> Iterator[Mechanic]:
    """One short greedy run, a record per step: what was drafted, what the target kept, what one forward bought."""
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0).validate()
    proposer = proposer or make_proposer(method, target)
    run = SpeculativeRun(target, proposer, _prompt_ids(target, prompt, chat), settings,
                         prompt_text=prompt if isinstance(prompt, str) else "")
    steps, tokens = [], []
    text = prompt if isinstance(prompt, str) else ""
    for step in run:
        steps.append(mechanic_step(step))
        tokens += step.tokens
        yield Mechanic(proposer.name, text, None, list(steps), list(tokens))
    yield Mechanic(proposer.name, text, run.result, steps, run.result.tokens)


# lesson 2: the output does not change -------------------------------------------------------------------------

@dataclass
class SideBySide:
    method: str
    speculative: list[str]  # token texts
    plain: list[str]
    identical: bool
    first_difference: int | None


def greedy_side_by_side(target: LoadedModel, prompt: str | list[int], method: str = "eagle", max_new_tokens: int = 32,
                        gamma: int = 4, chat: bool = True, proposer: Proposer | None = None) -> SideBySide:
    """Greedy decoding with and without speculation: the two outputs, token for token."""
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0).validate()
    ids = _prompt_ids(target, prompt, chat)
    proposer = proposer or make_proposer(method, target)
    spec = _run(target, proposer, ids, settings, prompt)
    plain = _run(target, PlainProposer(), ids, settings, prompt)
    texts = lambda result: [t.text for t in result.tokens if t.kind != TokenKind.REJECTED]  # noqa: E731
    diff = first_difference(spec.token_ids, plain.token_ids)
    return SideBySide(proposer.name, texts(spec), texts(plain), diff is None, diff)


def two_sample_test(a: Counter, b: Counter, min_expected: float = 5.0) -> Fit:
    """Chi-square test that two samples of outcomes come from one distribution (a contingency table of 2 rows).
    Outcomes with fewer than min_expected expected in the smaller sample are pooled into one cell."""
    na, nb = sum(a.values()), sum(b.values())
    n = na + nb
    if not na or not nb:
        return Fit(0.0, 1, 1.0, 0)
    kept = [k for k in set(a) | set(b) if (a.get(k, 0) + b.get(k, 0)) * min(na, nb) / n >= min_expected]
    cells = [(a.get(k, 0), b.get(k, 0)) for k in kept]
    rest = (na - sum(x for x, _ in cells), nb - sum(y for _, y in cells))
    if sum(rest):
        cells.append(rest)
    statistic = 0.0
    for x, y in cells:
        ex, ey = (x + y) * na / n, (x + y) * nb / n
        statistic += (x - ex) ** 2 / ex + (y - ey) ** 2 / ey
    dof = max(1, len(cells) - 1)
    return Fit(statistic, dof, chi_square_p_value(statistic, dof), len(kept))


@dataclass
class Histogram:
    label: str  # "plain", the method's name, or "wrong verifier"
    counts: Counter = field(default_factory=Counter)  # token id -> runs whose tested token it was
    drafted: int = 0
    accepted: int = 0

    @property
    def runs(self) -> int:
        return sum(self.counts.values())


@dataclass
class Distribution:
    """Lesson 2 under sampling. The tested token is the second new token: the first comes from the prompt's
    forward alone, the second is the first one a drafter proposes and the verifier accepts or replaces."""

    prompt: str
    method: str
    temperature: float
    runs: int  # planned per histogram
    plain: Histogram
    speculative: Histogram
    wrong: Histogram | None  # the same method with verify_sampled_without_residual
    exact: dict[int, float]  # the target's probability of each likely tested token (second_token_probs)
    token_texts: dict[int, str] = field(default_factory=dict)

    def _two(self, other: Histogram | None) -> Fit | None:
        return None if other is None or not other.runs or not self.plain.runs else two_sample_test(other.counts, self.plain.counts)

    def _fit(self, h: Histogram | None) -> Fit | None:
        if h is None or not h.runs or not self.exact:
            return None
        return goodness_of_fit(Counter({(t,): c for t, c in h.counts.items()}), {(t,): p for t, p in self.exact.items()},
                               h.runs)

    @property
    def p_value(self) -> float | None:
        """Two-sample test, speculative against plain: a small value would say speculation changed the output."""
        return _p_value(self._two(self.speculative))

    @property
    def wrong_p_value(self) -> float | None:
        return _p_value(self._two(self.wrong))

    @property
    def exact_p_value(self) -> float | None:
        """Goodness of fit of the speculative runs against the target's exact probabilities (more power: no
        sampling noise on the reference side)."""
        return _p_value(self._fit(self.speculative))

    @property
    def wrong_exact_p_value(self) -> float | None:
        return _p_value(self._fit(self.wrong))

    @property
    def passed(self) -> bool | None:
        values = [p for p in (self.p_value, self.exact_p_value) if p is not None]
        return None if self.p_value is None else min(values) >= SIGNIFICANCE

    @property
    def caught(self) -> bool | None:
        """The wrong verifier fails either test."""
        values = [p for p in (self.wrong_p_value, self.wrong_exact_p_value) if p is not None]
        return None if self.wrong_p_value is None else min(values) < SIGNIFICANCE

    def to_dict(self) -> dict:
        hist = lambda h: None if h is None else {  # noqa: E731
            "label": h.label, "runs": h.runs, "drafted": h.drafted, "accepted": h.accepted,
            "counts": {self.token_texts.get(t, str(t)): c for t, c in h.counts.most_common()}}
        return {"prompt": self.prompt, "method": self.method, "temperature": self.temperature, "runs": self.runs,
                "plain": hist(self.plain), "speculative": hist(self.speculative), "wrong": hist(self.wrong),
                "p_value": self.p_value, "exact_p_value": self.exact_p_value, "wrong_p_value": self.wrong_p_value,
                "wrong_exact_p_value": self.wrong_exact_p_value, "passed": self.passed, "caught": self.caught,
                "significance": SIGNIFICANCE}


def second_token_probs(target: LoadedModel, prompt_ids: list[int], settings: DecodeSettings, coverage: float = 0.995,
                       most: int = 256, floor: float = 1e-4) -> dict[int, float]:
    """The target's probability of each second new token, summed over the first: P(b) = sum_a p(a) p(b | a), over
    the most likely first tokens until they cover `coverage` of the mass (at most `most` of them). The mass left
    out (under 1 - coverage) is what goodness_of_fit pools, so the kept cells are short of it at most."""
    first = next_token_probs(target, [list(prompt_ids)], settings)[0].double()
    probs, tokens = first.sort(descending=True)
    chosen = int(torch.searchsorted(probs.cumsum(0), torch.tensor(coverage, dtype=probs.dtype)).item()) + 1
    chosen = max(1, min(chosen, most, int((probs > 0).sum())))
    prefixes = [list(prompt_ids) + [int(t)] for t in tokens[:chosen]]
    second = next_token_probs(target, prefixes, settings).double()
    marginal = (probs[:chosen, None] * second).sum(0)
    return {int(t): float(marginal[t]) for t in torch.nonzero(marginal >= floor).flatten()}


def distribution(target: LoadedModel, prompt: str | list[int], method: str = "eagle", runs: int = 100, temperature: float = 1.0,
                 first_seed: int = 0, wrong: bool = True, chat: bool = False,
                 make: Callable[[], Proposer] | None = None, batch: int = 10) -> Iterator[Distribution]:
    """Samples the tested token `runs` times with plain decoding, with the method, and (wrong=True) with the
    method under the deliberately wrong verifier, each run its own seed; yields after every `batch` runs.
    chat=False by default: a raw prompt is short, so that its forward, repeated every run, costs little."""
    make = make or (lambda: make_proposer(method, target))
    ids = _prompt_ids(target, prompt, chat)
    # two new tokens: the first from the prompt's forward, then one step that drafts one token (gamma = 1)
    settings = DecodeSettings(max_new_tokens=2, gamma=1, temperature=temperature, stop_at_eos=False).validate()
    exact = second_token_probs(target, ids, settings)
    name = make().name
    record = Distribution(prompt, name, temperature, runs, Histogram("plain"), Histogram(name),
                          Histogram("wrong verifier") if wrong else None, dict(exact))
    arms = [(record.plain, PlainProposer, None, first_seed + 2 * runs), (record.speculative, make, None, first_seed)]
    if wrong:  # same seeds as the method: the difference is the verifier's alone
        arms.append((record.wrong, make, verify_sampled_without_residual, first_seed))
    for histogram, factory, verifier, seed in arms:
        for i in range(runs):
            run = SpeculativeRun(target, factory(), ids, dataclasses.replace(settings, seed=seed + i), verifier=verifier,
                                 detail=False)
            for step in run:
                histogram.drafted += step.gamma
                histogram.accepted += step.n_accepted
            token = run.result.token_ids[1]
            histogram.counts[token] += 1
            if token not in record.token_texts:
                record.token_texts[token] = _text(target, token)
            if (i + 1) % batch == 0 or i + 1 == runs:
                yield record


# lesson 3: why checking K tokens costs about one step ---------------------------------------------------------

@dataclass
class VerifyCost:
    device: str
    points: list[CostPoint]
    weight_bytes: int
    bandwidth_gbs: float
    bandwidth_source: str

    @property
    def floor_ms(self) -> float:
        """The weights must be read once per forward: a forward cannot be faster than bytes / bandwidth."""
        return self.weight_bytes / (self.bandwidth_gbs * 1e9) * 1e3

    @property
    def implied_bandwidth_gbs(self) -> float | None:
        """The bandwidth the fastest measured forward implies if it read every weight once: where it is above the
        assumed figure, the assumption was too low (or part of the weights stayed in cache)."""
        fastest = min((p.ms for p in self.points), default=0.0)
        return self.weight_bytes / (fastest / 1e3) / 1e9 if fastest > 0 else None

    def ratio(self, k: int) -> float | None:
        """verify(K) / decode(1), the measured forward time of K positions over that of one."""
        by = {p.x: p.ms for p in self.points}
        return by[k] / by[1] if k in by and by.get(1) else None


def verify_cost(target: LoadedModel, positions: Sequence[int] = (1, 2, 3, 5, 8, 12, 16), context: int = 128,
                repeats: int = 3, bandwidth: float | None = None) -> Iterator[VerifyCost]:
    """The target's forward time against K new positions (specviz.cost_curve), beside the weight-read floor."""
    if bandwidth:
        gbs, source = bandwidth, "given"
    else:
        bytes_per_second, source = memory_bandwidth(target.device)
        gbs = bytes_per_second / 1e9
    record = VerifyCost(f"{target.device.type} ({target.describe()}, {str(target.dtype).replace('torch.', '')})", [],
                        weight_bytes(target.model), gbs, source)
    for point in measure_positions(target, positions, context=context, repeats=repeats):
        record.points.append(point)
        yield record


# lesson 4: acceptance decides the win -------------------------------------------------------------------------

PROMPTS = {  # kinds that speculation meets very differently
    "code": "Write a Python function that returns the squares of the numbers in a list, with a docstring.",
    "summarising": "Summarise in two sentences: The city council met on Tuesday to discuss the new bus routes. "
                   "The council agreed that the routes would start in May, and that the fares would not change.",
    "free writing": "Write a short poem about the sea at night.",
}


@dataclass
class LiteratureRange:
    drafter: str  # the kind of drafter
    methods: tuple[str, ...]  # specviz's methods of that kind
    speedup: str  # as reported
    targets: str  # the target models it was measured on
    source: str


LITERATURE = [  # quoted from the papers' abstracts and tables, rounded; all on targets of 7B and more, on GPUs
    LiteratureRange("generic small draft model", ("draft", "early-exit"), "2-3.4x (alpha about 0.5-0.9)",
                    "T5-XXL 11B (T5-small drafts); LaMDA 137B", "Leviathan et al. 2023, ICML"),
    LiteratureRange("Medusa heads", ("medusa",), "2.2x (Medusa-1), 2.3-3.6x (Medusa-2)", "Vicuna 7B-33B, Zephyr 7B",
                    "Cai et al. 2024, Medusa, ICML"),
    LiteratureRange("EAGLE feature drafter", ("eagle", "adaptive"), "2.7-3.5x on LLaMA2-Chat 70B (tau about 3.5-4)",
                    "Vicuna 7B-33B, LLaMA2-Chat 7B-70B, Mixtral 8x7B", "Li et al. 2024, EAGLE, ICML"),
    LiteratureRange("retrieval / n-gram lookup", ("retrieval", "ngram"), "1.6-2.4x",
                    "CodeLlama 7B-13B, Vicuna 7B-13B", "He et al. 2024, REST, NAACL"),
]


def literature_for(method: str) -> LiteratureRange | None:
    return next((r for r in LITERATURE if method in r.methods), None)


@dataclass
class AcceptanceRow:
    kind: str  # the prompt's kind
    method: str
    gamma: int
    alpha: float | None  # accepted / drafted
    tau: float  # tokens per target forward
    c: float | None  # drafter time per token / target forward time
    measured_speedup: float  # plain wall time / the method's, same prompt and settings
    expected_speedup: float | None  # (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))
    new_tokens: int


def expected_curve(alpha: float, c: float, gammas: Sequence[int] = tuple(range(0, 13))) -> list[tuple[int, float]]:
    """The expected speedup at each gamma (Leviathan et al. 2023, theorem 3.8)."""
    return [(g, expected_speedup(alpha, g, c)) for g in gammas]


def acceptance(target: LoadedModel, methods: Sequence[str] = ("ngram", "retrieval", "early-exit", "medusa", "eagle"),
               prompts: dict[str, str] | None = None, gamma: int = 4, max_new_tokens: int = 32,
               make: Callable[[str], Proposer] | None = None) -> Iterator[list[AcceptanceRow]]:
    """Each method on each prompt, greedy, beside plain decoding of the same prompt; yields the table so far."""
    make = make or (lambda method: make_proposer(method, target))
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0, stop_at_eos=False).validate()
    warm_up(target)
    rows: list[AcceptanceRow] = []
    for kind, prompt in (prompts or PROMPTS).items():
        ids = _prompt_ids(target, prompt, True)
        plain = _run(target, PlainProposer(), ids, settings, prompt, detail=False)
        for method in methods:
            result = _run(target, make(method), ids, settings, prompt, detail=False)
            m = result.metrics
            expected = None if m.acceptance_rate is None else expected_speedup(m.acceptance_rate, gamma, m.cost_ratio or 0.0)
            rows.append(AcceptanceRow(kind, result.method, gamma, m.acceptance_rate, m.mean_accepted_length, m.cost_ratio,
                                      plain.metrics.wall_seconds / m.wall_seconds, expected, m.new_tokens))
            yield list(rows)


# lesson 6: what each drafter costs ----------------------------------------------------------------------------

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


def drafter_costs(target: LoadedModel, methods: Sequence[str] = ("ngram", "retrieval", "early-exit", "medusa", "eagle"),
                  prompt: str = PROMPTS["code"], gamma: int = 4, max_new_tokens: int = 32,
                  make: Callable[[str], Proposer] | None = None) -> Iterator[list[DrafterCost]]:
    """Per method: what the loaded drafter adds to memory, and its acceptance on one prompt."""
    make = make or (lambda method: make_proposer(method, target))
    settings = DecodeSettings(max_new_tokens=max_new_tokens, gamma=gamma, temperature=0.0, stop_at_eos=False).validate()
    ids = _prompt_ids(target, prompt, True)
    target_params = sum(p.numel() for p in target.model.parameters())
    target_bytes = weight_bytes(target.model)
    rows: list[DrafterCost] = []
    for method in methods:
        proposer = make(method)
        params, size = extra_parameters(proposer, target), extra_bytes(proposer, target)
        result = _run(target, proposer, ids, settings, prompt, detail=False)
        rows.append(DrafterCost(result.method, params, size, target_params, target_bytes,
                                result.metrics.acceptance_rate, result.metrics.mean_accepted_length))
        yield list(rows)

