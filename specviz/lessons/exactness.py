"""Lesson 2, the output does not change: greedy decoding with and without speculation token for token, and under
sampling, histograms of one token with and without speculation (and under a deliberately wrong verifier, the
control the test must catch), compared by two-sample and goodness-of-fit tests."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ..api import first_difference, make_proposer
from ..engine.batch import decode_batch
from ..engine.run import SpeculativeRun
from ..measure.exactness_check import Fit, chi_square_p_value, goodness_of_fit, next_token_probs
from ..models.loading import LoadedModel
from ..proposers import PlainProposer, Proposer
from ..records.schema import TokenKind
from ..settings import DecodeSettings
from ..rule.wrong_verifiers import verify_sampled_without_residual
from .common import p_text, prompt_ids, run_once, token_text
from .lesson import Lesson

CLAIM = ("Speculative decoding does not change the output. Greedy: the same tokens. Sampling: the same "
         "distribution, whatever the drafter.")
SIGNIFICANCE = 0.01  # a p-value below it says "not the same distribution"
HISTOGRAM_ROWS = 12  # the most frequent tested tokens a table lists
PLAIN_ROWS = 25  # plain decoding's runs decoded at once (at least): a batch forward costs a CPU far less than 25


def _p_value(fit: Fit | None) -> float | None:
    return None if fit is None else fit.p_value


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
    ids = prompt_ids(target, prompt, chat)
    proposer = proposer or make_proposer(method, target)
    spec = run_once(target, proposer, ids, settings, prompt)
    plain = run_once(target, PlainProposer(), ids, settings, prompt)
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

    prompt: str | list[int]  # as given: text, or token ids (the tiny test models have no tokenizer)
    method: str
    temperature: float
    runs: int  # planned per histogram
    plain: Histogram
    speculative: Histogram
    wrong: Histogram | None  # the same method with verify_sampled_without_residual
    exact: dict[int, float]  # the target's probability of each likely tested token (second_token_probs)
    token_texts: dict[int, str] = field(default_factory=dict)

    def _two(self, other: Histogram | None) -> Fit | None:
        return None if other is None or not other.runs or not self.plain.runs else two_sample_test(other.counts,
                                                                                                   self.plain.counts)

    def _fit(self, h: Histogram | None) -> Fit | None:
        if h is None or not h.runs or not self.exact:
            return None
        return goodness_of_fit(Counter({(t,): c for t, c in h.counts.items()}),
                               {(t,): p for t, p in self.exact.items()},
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


def distribution(target: LoadedModel, prompt: str | list[int], method: str = "eagle", runs: int = 100,
                 temperature: float = 1.0,
                 first_seed: int = 0, wrong: bool = True, chat: bool = False,
                 make: Callable[[], Proposer] | None = None, batch: int = 10) -> Iterator[Distribution]:
    """Samples the tested token `runs` times with plain decoding, with the method, and (wrong=True) with the
    method under the deliberately wrong verifier, each run its own seed; yields after every `batch` runs. Plain
    decoding runs `batch` seeds at once (specviz.engine.batch: a row samples as its batch-1 run of the same seed does),
    a third of the lesson's time on a CPU otherwise. chat=False by default: a raw prompt is short, so that its
    forward, repeated every run, costs little."""
    make = make or (lambda: make_proposer(method, target))
    ids = prompt_ids(target, prompt, chat)
    # two new tokens: the first from the prompt's forward, then one step that drafts one token (gamma = 1)
    settings = DecodeSettings(max_new_tokens=2, gamma=1, temperature=temperature, stop_at_eos=False).validate()
    exact = second_token_probs(target, ids, settings)
    name = make().name
    record = Distribution(prompt, name, temperature, runs, Histogram("plain"), Histogram(name),
                          Histogram("wrong verifier") if wrong else None, dict(exact))
    plain_seed, rows_at_once = first_seed + 2 * runs, max(batch, PLAIN_ROWS)
    for start in range(0, runs, rows_at_once):  # in batches: each row samples as its batch-1 run of that seed
        rows = min(rows_at_once, runs - start)
        batched = decode_batch(target, PlainProposer, [ids] * rows,
                               dataclasses.replace(settings, seed=plain_seed + start),
                               batch_size=rows)
        for output in batched.token_ids:
            _count(record, record.plain, target, output[1])
        yield record
    arms = [(record.speculative, make, None, first_seed)]
    if wrong:  # same seeds as the method: the difference is the verifier's alone
        arms.append((record.wrong, make, verify_sampled_without_residual, first_seed))
    for histogram, factory, verifier, seed in arms:
        for i in range(runs):
            run = SpeculativeRun(target, factory(), ids, dataclasses.replace(settings, seed=seed + i),
                                 verifier=verifier,
                                 detail=False)
            for step in run:
                histogram.drafted += step.gamma
                histogram.accepted += step.n_accepted
            _count(record, histogram, target, run.result.token_ids[1])
            if (i + 1) % batch == 0 or i + 1 == runs:
                yield record


def _count(record: Distribution, histogram: Histogram, target: LoadedModel, token: int) -> None:
    histogram.counts[token] += 1
    if token not in record.token_texts:
        record.token_texts[token] = token_text(target, token)


def side_by_side_sentence(record: SideBySide) -> str:
    if record.identical:
        return f"Greedy: the two outputs are **identical, all {len(record.plain)} tokens**."
    return (
        f"Greedy: the outputs **differ at token {record.first_difference}** (a bug, or float rounding on this device)."
    )


def distribution_headers(record: Distribution) -> list[str]:
    arms = ["token", "plain", record.method] + (["wrong verifier"] if record.wrong is not None else [])
    return arms + ["target's exact probability"]


def distribution_rows(record: Distribution, most: int = HISTOGRAM_ROWS) -> list[list]:
    """The most frequent tested tokens: each arm's share of its runs, beside the target's exact probability."""
    arms = [h for h in (record.plain, record.speculative, record.wrong) if h is not None]
    total = sum((h.counts for h in arms), start=Counter())
    share = lambda h, t: round(h.counts.get(t, 0) / h.runs, 3) if h.runs else "–"  # noqa: E731
    return [[repr(record.token_texts.get(t, str(t))), *[share(h, t) for h in arms], round(record.exact.get(t, 0.0), 3)]
            for t, _ in total.most_common(most)]


def distribution_sentence(record: Distribution | None, done: bool = True) -> str:
    """What the tests found; while the lesson runs (done=False), labelled partial, with no verdict the remaining
    seeds could change."""
    if record is None or not record.speculative.runs:
        return ""
    alpha = SIGNIFICANCE
    partial = (f"**Partial, {record.speculative.runs} of {record.runs} seeds so far** (the verdict comes with all "
               f"{record.runs}): " if not done else "")
    verdict = ("no difference found" if record.passed else f"**below {alpha}: a difference**") if done else \
        ("no difference so far" if record.passed else f"below {alpha} so far")
    text = (f"{partial}With {record.method}: two-sample p = **{p_text(record.p_value)}** against plain decoding, "
            f"p = {p_text(record.exact_p_value)} against the exact probabilities: {verdict}.")
    if record.wrong is not None and record.wrong.runs:
        if done:
            caught = (f"**caught** (below {alpha})" if record.caught else
                      "not caught at this many runs (more runs give the test more power)")
        else:
            caught = (f"caught already at {record.wrong.runs} seeds (below {alpha})" if record.caught else
                      f"not caught yet at {record.wrong.runs} seeds")
        text += (f" The wrong verifier: p = **{p_text(record.wrong_p_value)}** and "
                 f"{p_text(record.wrong_exact_p_value)}: {caught}.")
        text += (" The second p-value sees more: it compares the runs with the target's probabilities, computed "
                 "rather than sampled, so only one side is noisy; the first compares two samples, and plain "
                 "decoding's own noise hides a small difference unless there are many more runs.")
    return text


@dataclass
class Unchanged:
    """The whole lesson: the greedy side by side, then the sampled histograms as they fill."""

    greedy: SideBySide
    sampled: Distribution | None = None


def unchanged(target: LoadedModel, prompt: str | list[int], method: str = "medusa", runs: int = 150,
              temperature: float = 0.7, max_new_tokens: int = 32) -> Iterator[Unchanged]:
    """Both halves on one prompt, formatted as a chat turn in both: the lesson shows that prompt, and its sampled
    half must test the same text its greedy half wrote from."""
    greedy = greedy_side_by_side(target, prompt, method, max_new_tokens=max_new_tokens, chat=True)
    yield Unchanged(greedy)
    for record in distribution(target, prompt, method, runs, temperature, chat=True):
        yield Unchanged(greedy, record)


def unchanged_sentence(record: Unchanged) -> str:
    return " ".join(s for s in (side_by_side_sentence(record.greedy), distribution_sentence(record.sampled)) if s)


SETTINGS = dict(prompt="Once upon a time, there was a", method="medusa", gamma=1, temperature=0.7, max_new=32, seed=0)
RUNS = 150  # seeds per histogram


def _run(target: LoadedModel) -> Iterator[Unchanged]:
    s = SETTINGS
    return unchanged(target, s["prompt"], s["method"], RUNS, s["temperature"], s["max_new"])


def _rows(record: Unchanged) -> list[list]:
    return [] if record.sampled is None else distribution_rows(record.sampled)


def _headers(record: Unchanged | None) -> list[str]:
    return [] if record is None or record.sampled is None else distribution_headers(record.sampled)


LESSON = Lesson(2, "exact", "The output does not change", "Same output", CLAIM, _run, _headers, _rows,
                unchanged_sentence, Unchanged, settings=SETTINGS)
