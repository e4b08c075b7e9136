"""The distance to a perfect drafter: what a run would have given had every draft been accepted, at the costs it
measured, and how many drafts its steps accepted (the histogram vLLM and SGLang report per request).

The oracle drafter keeps the run's steps as they were (what each drafted, what drafting and verifying it cost)
and only has every draft accepted. A chain step that drafted g tokens then gives g + 1 tokens. Variable-length
methods keep their own lengths: an adaptive step counts what it chose to draft, not the most it might have; a
step that drafted nothing (a lookup that found no match, plain decoding) gives 1 token, as the oracle accepts
drafts but does not make them. A tree step gives gamma + 1: the tree was drafted to depth gamma at most and its
record keeps only the line it showed, so gamma is the bound it was built to. Its cost is the tree's measured one.

A run's time is the prefill plus its steps, each at the run's mean cost a step (drafting, verifying and the
rest: the host's work between them); the oracle needs new_tokens / its tau steps of that cost. At the run's own
tau this gives back its measured wall time, so the two speedups differ by acceptance alone."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .schema import RunMetrics, RunResult, StepRecord


def accepted_length_histogram(steps: list[StepRecord], gamma: int) -> list[int]:
    """[k]: the steps that drafted and accepted k of their drafts, for k = 0 .. gamma (longer when a step
    drafted more than gamma). Steps that drafted nothing are not in it: they had no draft to accept."""
    longest = max([gamma, *(s.n_accepted for s in steps)])
    counts = [0] * (longest + 1)
    for step in steps:
        if step.gamma > 0:
            counts[step.n_accepted] += 1
    return counts


def oracle_tokens_per_step(steps: list[StepRecord], gamma: int) -> float:
    """The oracle's tau: the mean, over the run's steps, of the tokens each would have given with every draft
    accepted (the module's docstring defines it for trees and for steps that drafted nothing)."""
    if not steps:
        return 0.0
    return sum((gamma if s.tree_size else s.gamma) + 1 for s in steps) / len(steps)


def projected_wall(new_tokens: int, tokens_per_step: float, seconds_per_step: float, prefill_seconds: float) -> float:
    """The wall time of a run that gives `tokens_per_step` tokens a step, each step costing `seconds_per_step`."""
    if tokens_per_step <= 0:
        return prefill_seconds
    return prefill_seconds + new_tokens / tokens_per_step * seconds_per_step


@dataclass
class OracleFigures:
    tau: float  # the run's tokens per step
    oracle_tau: float  # every draft accepted
    speedup: float | None  # plain's wall time over the run's (None: no plain run)
    oracle_speedup: float | None  # plain's over the oracle's projected wall time
    oracle_wall_seconds: float | None  # the oracle's projected wall time (None: no steps)
    verify_share: float | None  # verifying's share of the run's wall time
    draft_ms_per_step: float | None
    verify_ms_per_step: float | None
    rest_ms_per_step: float | None  # the rest of a step: the host's work between drafting and verifying
    accepted_lengths: list[int]  # accepted_length_histogram

    def to_dict(self) -> dict:
        return asdict(self)


def oracle_figures(steps: list[StepRecord], metrics: RunMetrics, gamma: int,
                   plain_wall_seconds: float | None) -> OracleFigures:
    """The run's figures beside the oracle drafter's, at the run's measured costs. metrics: the run's (its wall
    time the same clock as plain_wall_seconds)."""
    count = len(steps)
    decode_seconds = metrics.wall_seconds - metrics.prefill_seconds
    per_step = decode_seconds / count if count else None
    oracle_tau = oracle_tokens_per_step(steps, gamma)
    oracle_wall = None if per_step is None else projected_wall(metrics.new_tokens, oracle_tau, per_step,
                                                                metrics.prefill_seconds)

    def over(wall):
        return plain_wall_seconds / wall if plain_wall_seconds and wall and wall > 0 else None

    def ms(seconds):
        return None if not count else 1e3 * seconds / count

    return OracleFigures(
        tau=metrics.new_tokens / count if count else 0.0, oracle_tau=oracle_tau,
        speedup=over(metrics.wall_seconds), oracle_speedup=over(oracle_wall), oracle_wall_seconds=oracle_wall,
        verify_share=metrics.verify_seconds / metrics.wall_seconds if metrics.wall_seconds > 0 else None,
        draft_ms_per_step=ms(metrics.draft_seconds), verify_ms_per_step=ms(metrics.verify_seconds),
        rest_ms_per_step=ms(decode_seconds - metrics.draft_seconds - metrics.verify_seconds),
        accepted_lengths=accepted_length_histogram(steps, gamma),
    )


def run_oracle(result: RunResult, plain_wall_seconds: float | None) -> OracleFigures:
    """oracle_figures of a finished run, at the gamma it ran with."""
    return oracle_figures(result.steps, result.metrics, int(result.settings.get("gamma", 0)), plain_wall_seconds)


def pooled_histogram(histograms: list[list[int]]) -> list[int]:
    """Several requests' accepted-length histograms added up (the longest sets the length)."""
    counts = [0] * max((len(h) for h in histograms), default=0)
    for histogram in histograms:
        for k, count in enumerate(histogram):
            counts[k] += count
    return counts
