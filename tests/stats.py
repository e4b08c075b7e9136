"""The tests' distribution assertion: specviz.measure.exactness_check's chi-square goodness-of-fit test at a 1e-4 level."""
from __future__ import annotations

from collections import Counter

from specviz.measure.exactness_check import goodness_of_fit

ALPHA = 1e-4  # the tests are seeded, so a pass is reproducible; the level keeps false alarms rare


def assert_same_distribution(counts: Counter, probs: dict, draws: int) -> None:
    fit = goodness_of_fit(counts, probs, draws)
    assert fit.p_value >= ALPHA, (f"chi-square {fit.statistic:.1f} (dof {fit.dof}, p = {fit.p_value:.2g}): "
                                  "not the target's distribution")
