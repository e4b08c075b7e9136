"""A chi-square goodness-of-fit test without scipy: is an empirical histogram drawn from given probabilities?"""
from __future__ import annotations

import math
from collections import Counter

Z_1E4 = 3.719  # standard normal quantile for a 1e-4 false-alarm rate


def chi_square_critical(dof: int, z: float = Z_1E4) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * math.sqrt(a)) ** 3


def chi_square(counts: Counter, probs: dict, draws: int, min_expected: float = 5.0) -> tuple[float, int]:
    """Statistic and degrees of freedom; cells expected fewer than min_expected times are pooled into one."""
    statistic, cells, pooled_observed, pooled_expected = 0.0, 0, 0, 0.0
    for outcome in set(probs) | set(counts):
        expected = probs.get(outcome, 0.0) * draws
        observed = counts.get(outcome, 0)
        if expected < min_expected:
            pooled_observed += observed
            pooled_expected += expected
            continue
        statistic += (observed - expected) ** 2 / expected
        cells += 1
    if pooled_expected > 0:
        statistic += (pooled_observed - pooled_expected) ** 2 / pooled_expected
        cells += 1
    elif pooled_observed > 0:
        return math.inf, max(1, cells - 1)  # outcomes the target gives (almost) no probability
    return statistic, max(1, cells - 1)


def assert_same_distribution(counts: Counter, probs: dict, draws: int) -> None:
    statistic, dof = chi_square(counts, probs, draws)
    critical = chi_square_critical(dof)
    assert statistic < critical, f"chi-square {statistic:.1f} >= {critical:.1f} (dof {dof}): not the target's distribution"
