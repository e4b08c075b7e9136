"""Is the engine's sampled output the target's distribution? A goodness-of-fit test, end to end.

The target's exact distribution of the first `depth` new tokens is computed by enumeration (real forward
passes over every likely prefix, after the run's temperature / top-k / top-p); the engine then samples the
same prompt many times with a method, each run with its own seed, and a chi-square test compares the
outputs' frequencies with the exact probabilities. Runs generate a few tokens past `depth`, so that the
first steps draft several tokens (a run of exactly `depth` tokens would draft at most depth - 1).

A control shows the test has power: the same method at a slightly lower temperature (its output is then
exactly the target's at that temperature, a small, known bias) must fail the same test.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from ..engine.run import SpeculativeRun
from ..models.loading import LoadedModel
from ..proposers import Proposer
from ..rule.sampling import warp_probs
from ..runners.static import make_runner
from ..settings import DecodeSettings

REST = ("rest",)  # the pooled cell: every outcome whose expected count is below the minimum
MIN_EXPECTED = 5.0  # chi-square's usual rule: cells expected fewer times are pooled
EXTRA_TOKENS = 2  # generated past `depth`, so that the steps deciding the tested tokens draft in full


# chi-square p-value -------------------------------------------------------------------------------------------

def _lower_gamma_series(a: float, x: float) -> float:
    """P(a, x), the regularized lower incomplete gamma function, by its series (x < a + 1)."""
    term = total = 1.0 / a
    n = a
    for _ in range(10_000):
        n += 1
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_gamma_fraction(a: float, x: float) -> float:
    """Q(a, x), the regularized upper incomplete gamma function, by Lentz's continued fraction (x >= a + 1)."""
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return h * math.exp(-x + a * math.log(x) - math.lgamma(a))


def chi_square_p_value(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X chi-square distributed with dof degrees of freedom."""
    if statistic <= 0:
        return 1.0
    if math.isinf(statistic):
        return 0.0
    a, x = dof / 2, statistic / 2
    return 1.0 - _lower_gamma_series(a, x) if x < a + 1 else _upper_gamma_fraction(a, x)


@dataclass
class Fit:
    statistic: float
    dof: int
    p_value: float
    cells: int  # cells tested on their own (the pooled rest is one more)


def goodness_of_fit(counts: Counter, probs: dict, draws: int, min_expected: float = MIN_EXPECTED) -> Fit:
    """Chi-square test of observed outcome counts against exact probabilities. Outcomes expected fewer than
    min_expected times, and outcomes missing from probs, are pooled into one cell whose probability is what
    the others leave."""
    kept = {outcome: p for outcome, p in probs.items() if outcome != REST and p * draws >= min_expected}
    rest_p = max(0.0, 1.0 - sum(kept.values()))
    rest_observed = draws - sum(counts.get(outcome, 0) for outcome in kept)
    statistic = sum((counts.get(outcome, 0) - p * draws) ** 2 / (p * draws) for outcome, p in kept.items())
    cells = len(kept)
    if rest_p * draws >= 1e-9:
        statistic += (rest_observed - rest_p * draws) ** 2 / (rest_p * draws)
        cells += 1
    elif rest_observed > 0:  # outcomes the target gives no probability
        statistic = math.inf
    dof = max(1, cells - 1)
    return Fit(statistic, dof, chi_square_p_value(statistic, dof), len(kept))


# the target's exact distribution ------------------------------------------------------------------------------

@torch.inference_mode()
def next_token_probs(target: LoadedModel, prefixes: list[list[int]], settings: DecodeSettings,
                     batch: int = 64) -> torch.Tensor:
    """The target's warped distribution after each prefix (all of one length) -> [len(prefixes), V] float32
    on the host. Plain transformers forwards, independent of the engine's runners."""
    rows = []
    for start in range(0, len(prefixes), batch):
        ids = torch.tensor(prefixes[start:start + batch], dtype=torch.long, device=target.device)
        logits = target.model(input_ids=ids, use_cache=False).logits[:, -1]
        rows.append(warp_probs(logits, settings).cpu())
    return torch.cat(rows)


def target_distribution(target: LoadedModel, prompt_ids: list[int], settings: DecodeSettings, depth: int,
                        draws: int, min_expected: float = MIN_EXPECTED) -> dict[tuple, float]:
    """The exact probability of every sequence of `depth` new tokens expected at least min_expected times in
    `draws` samples (goodness_of_fit pools the rest). A prefix is extended only while it is itself that
    likely, so the enumeration stays small whatever the vocabulary."""
    floor = min_expected / draws
    level: dict[tuple, float] = {(): 1.0}
    for _ in range(depth):
        prefixes = [prefix for prefix, p in level.items() if p >= floor]
        if not prefixes:
            return {}
        rows = next_token_probs(target, [list(prompt_ids) + list(prefix) for prefix in prefixes], settings)
        extended: dict[tuple, float] = {}
        for prefix, row in zip(prefixes, rows):
            joint = row.double() * level[prefix]
            for token in torch.nonzero(joint >= floor).flatten().tolist():
                extended[prefix + (token,)] = float(joint[token])
        level = extended
    return level


@dataclass
class Samples:
    counts: Counter  # the first `depth` tokens of each run
    drafted: int = 0  # over every run: what the method drafted, and how much of it the output kept
    accepted: int = 0
    tree_steps: int = 0  # steps that verified a draft tree (a tree test that never drafted one tests chains)
    loops: Counter = dataclasses.field(default_factory=Counter)  # runs on the device loop and on the host loop


def sample_outputs(target: LoadedModel, make_proposer: Callable[[], Proposer], prompt_ids: list[int],
                   settings: DecodeSettings, depth: int, runs: int, first_seed: int = 0, verifier=None,
                   progress: Callable[[int], None] | None = None) -> Samples:
    """The first `depth` tokens of `runs` engine runs (seeds first_seed, first_seed + 1, ...), counted. The runs
    share one runner of the target, each run resetting it (as the app's runs share a pooled one): its checks and
    weights are prepared once, not thousands of times."""
    samples = Samples(Counter())
    # the hidden states the proposer reads: several target layers side by side for DFlash and EAGLE-3
    runner = make_runner(target.model, features=make_proposer().target_layers)
    try:
        for i in range(runs):
            run_settings = dataclasses.replace(settings, seed=first_seed + i)
            run = SpeculativeRun(target, make_proposer(), prompt_ids, run_settings, runner=runner, verifier=verifier,
                                 detail=False)
            for step in run:
                samples.drafted += step.gamma
                samples.accepted += step.n_accepted
                samples.tree_steps += bool(step.tree_size)
            samples.counts[tuple(run.result.token_ids[:depth])] += 1
            samples.loops[run.result.settings["loop"]] += 1
            if progress is not None:
                progress(i + 1)
    finally:
        runner.release()
    return samples


LEAST_DECISIONS = 20  # accepted drafts, and rejected ones, below which a path of the verifier was barely tested
LEAST_SHARE = 0.05  # ... or below this share of the drafts


def coverage_warning(drafted: int, accepted: int) -> str | None:
    """What a run of the test left untested, or None: a sampled verifier has two paths, keeping a draft (with
    probability min(1, p/q)) and drawing from the residual after a rejection; a test whose drafts were nearly all
    rejected (or all accepted) says little about the other path, whatever its p-value."""
    if drafted == 0:
        return "the method drafted nothing: the test checked plain decoding only; give a prompt the drafter can predict"
    least = max(LEAST_DECISIONS, LEAST_SHARE * drafted)
    rejected = drafted - accepted
    if accepted < least:
        return (f"only {accepted} of {drafted} drafts were accepted: the test barely exercised keeping a draft; give a "
                "prompt the drafter can predict (--prompt) or a lower --temperature")
    if rejected < least:
        return (f"only {rejected} of {drafted} drafts were rejected: the test barely exercised the residual drawn "
                "after "
                "a rejection; give a prompt the drafter predicts less well or a higher --temperature")
    return None


def _stage(progress: Callable[[str, int], None] | None, stage: str) -> Callable[[int], None] | None:
    return None if progress is None else partial(progress, stage)


@dataclass
class ExactnessReport:
    method: str
    samples: int
    depth: int
    fit: Fit  # the method at the run's settings against the target's exact distribution
    control: Fit | None  # the method at control_temperature against the same distribution: must fail
    control_temperature: float | None
    drafted: int  # over the method's runs: the test means little where the method drafted nothing
    accepted: int
    loops: Counter = dataclasses.field(default_factory=Counter)  # the method's runs by loop (device, host)

    def passed(self, alpha: float) -> bool:
        return self.fit.p_value >= alpha

    def control_caught(self, alpha: float) -> bool | None:
        return None if self.control is None else self.control.p_value < alpha


def check_exactness(target: LoadedModel, make_proposer: Callable[[], Proposer], prompt_ids: list[int],
                    settings: DecodeSettings, samples: int, depth: int = 2, control_factor: float | None = 0.9,
                    progress: Callable[[str, int], None] | None = None) -> ExactnessReport:
    """Samples the method `samples` times and tests the first `depth` tokens against the target's exact
    distribution; with control_factor, also the method at temperature * control_factor (a run it must fail)."""
    if settings.greedy:
        raise ValueError("exactness under sampling needs a temperature above 0")
    settings = dataclasses.replace(settings, max_new_tokens=depth + EXTRA_TOKENS, stop_at_eos=False).validate()
    exact = target_distribution(target, prompt_ids, settings, depth, samples)
    first_seed = settings.seed or 0  # run i uses seed first_seed + i; the control the next `samples` seeds
    drawn = sample_outputs(target, make_proposer, prompt_ids, settings, depth, samples, first_seed,
                           progress=_stage(progress, "method"))
    fit = goodness_of_fit(drawn.counts, exact, samples)
    control, control_temperature = None, None
    if control_factor is not None:
        control_temperature = settings.temperature * control_factor
        cooler = dataclasses.replace(settings, temperature=control_temperature)
        cooled = sample_outputs(target, make_proposer, prompt_ids, cooler, depth, samples, first_seed + samples,
                                progress=_stage(progress, "control"))
        control = goodness_of_fit(cooled.counts, exact, samples)
    return ExactnessReport(make_proposer().name, samples, depth, fit, control, control_temperature,
                           drawn.drafted, drawn.accepted, drawn.loops)
