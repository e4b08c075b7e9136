"""The statistics under check-exactness: the chi-square p-value and the pooled goodness-of-fit test."""
from collections import Counter

import pytest

from specviz.measure.exactness_check import chi_square_p_value, goodness_of_fit

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("statistic,dof,p", [(3.841, 1, 0.05), (10.0, 5, 0.07524), (30.0, 2, 3.059e-7),
                                             (0.5, 3, 0.9189), (200.0, 150, 0.003973), (124.34, 100, 0.05)])
def test_p_value_matches_the_chi_square_table(statistic, dof, p):
    assert chi_square_p_value(statistic, dof) == pytest.approx(p, rel=2e-3)


def test_p_value_edges():
    assert chi_square_p_value(0.0, 4) == 1.0
    assert chi_square_p_value(float("inf"), 4) == 0.0


def test_counts_that_match_the_probabilities_pass_and_skewed_ones_fail():
    probs = {"a": 0.5, "b": 0.3, "c": 0.2}
    assert goodness_of_fit(Counter(a=500, b=300, c=200), probs, 1000).p_value > 0.99
    skewed = goodness_of_fit(Counter(a=560, b=270, c=170), probs, 1000)
    assert skewed.p_value < 0.01 and skewed.dof == 2


def test_rare_outcomes_are_pooled_with_what_the_listed_ones_leave():
    probs = {"a": 0.6, "b": 0.398}  # 0.002 left for everything else: expected twice in 1,000
    fit = goodness_of_fit(Counter(a=600, b=398, z=2), probs, 1000)
    assert fit.cells == 2 and fit.dof == 2 and fit.p_value > 0.99  # a, b and the pooled rest
    assert goodness_of_fit(Counter(a=600, b=380, z=20), probs, 1000).p_value < 1e-6


def test_an_outcome_the_target_never_gives_fails_at_once():
    fit = goodness_of_fit(Counter(a=999, z=1), {"a": 1.0}, 1000)
    assert fit.p_value == 0.0


def test_a_test_that_barely_exercised_a_path_says_so():
    from specviz.measure.exactness_check import coverage_warning

    assert "only 1 of 649 drafts were accepted" in coverage_warning(649, 1)  # ngram on a prompt it cannot predict
    assert "only 3 of 400 drafts were rejected" in coverage_warning(400, 397)
    assert "drafted nothing" in coverage_warning(0, 0)
    assert coverage_warning(649, 120) is None  # the control: both paths well exercised
