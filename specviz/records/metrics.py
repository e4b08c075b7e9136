"""Run metrics, defined as vLLM, SGLang and llama.cpp define them (docs/design.md)."""
from __future__ import annotations

from .schema import RunMetrics, StepRecord


def per_position_acceptance(steps: list[StepRecord]) -> list[float]:
    """[i]: among steps that drafted at least i + 1 tokens, the share whose first i + 1 were all accepted."""
    longest = max((s.gamma for s in steps), default=0)
    shares = []
    for i in range(longest):
        eligible = [s for s in steps if s.gamma > i]
        shares.append(sum(s.n_accepted > i for s in eligible) / len(eligible))
    return shares


def summarize(steps: list[StepRecord], new_tokens: int, wall_seconds: float, prefill_seconds: float) -> RunMetrics:
    drafted = sum(s.gamma for s in steps)
    accepted = sum(s.n_accepted for s in steps)
    draft_seconds = sum(s.draft_ms for s in steps) / 1e3
    verify_seconds = sum(s.verify_ms for s in steps) / 1e3
    forwards = len(steps)
    cost_ratio = None
    if drafted and forwards and verify_seconds > 0:
        cost_ratio = (draft_seconds / drafted) / (verify_seconds / forwards)
    return RunMetrics(
        new_tokens=new_tokens,
        steps=len(steps),
        target_forwards=forwards,
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=accepted / drafted if drafted else None,
        mean_accepted_length=new_tokens / forwards if forwards else 0.0,
        per_position_acceptance=per_position_acceptance(steps),
        wall_seconds=wall_seconds,
        prefill_seconds=prefill_seconds,
        draft_seconds=draft_seconds,
        verify_seconds=verify_seconds,
        tokens_per_second=new_tokens / wall_seconds if wall_seconds > 0 else 0.0,
        cost_ratio=cost_ratio,
    )


def tested_acceptance(steps: list[StepRecord]) -> float | None:
    """Accepted drafts over the drafts the target tested: the per-token acceptance that Leviathan et al.'s
    (1 - alpha^(gamma+1)) / (1 - alpha) assumes. A chain's drafts after its first rejection are never tested (the
    step ends there), so accepted / drafted counts them as failures and understates that alpha; this is its
    estimate from i.i.d. trials. None when nothing was tested. A step's gamma is its chain's length (a tree step,
    whose siblings are alternatives rather than trials in a row, is counted by its line shown, `positions`)."""
    accepted = tested = 0
    for s in steps:
        length = len(s.positions) if s.tree_size else s.gamma
        if length:
            accepted += s.n_accepted
            tested += s.n_accepted + (1 if s.n_accepted < length else 0)
    return accepted / tested if tested else None


def running_metrics(steps: list[StepRecord], engine_seconds: float, prefill_seconds: float = 0.0) -> RunMetrics:
    """RunMetrics of the steps so far, with speeds on `engine_seconds` (the service's engine time:
    specviz.service.stepped_runs)."""
    emitted = steps[-1].total_emitted if steps else 0
    return summarize(steps, emitted, engine_seconds, prefill_seconds)
