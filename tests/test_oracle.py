"""The oracle drafter's figures and the accepted-length histogram: on hand-made steps whose answers are known,
and on real runs of the tiny models (a drafter that is the target itself is the oracle; a perturbed one is not)."""
import pytest

from specviz.api import run_once
from specviz.records.oracle import accepted_length_histogram, oracle_figures, oracle_tokens_per_step, projected_wall
from specviz.proposers import ModelDrafter, PlainProposer
from specviz.records.schema import RunMetrics, StepRecord, TokenKind, TokenRecord, TopTokens
from specviz.settings import DecodeSettings


def step(gamma, accepted, tree_size=0, draft_ms=1.0, verify_ms=4.0):
    emitted = accepted + 1
    return StepRecord(index=0, gamma=gamma, positions=[], n_accepted=accepted,
                      next_token=TokenRecord(id=0, text="", kind=TokenKind.BONUS, step=0),
                      next_top=TopTokens(ids=[], probs=[]), tokens=[], draft_ms=draft_ms, verify_ms=verify_ms,
                      elapsed_s=0.0, emitted=emitted, total_emitted=0, tree_size=tree_size)


def metrics_of(steps, wall, prefill):
    new = sum(s.emitted for s in steps)
    return RunMetrics(new_tokens=new, steps=len(steps), target_forwards=len(steps), drafted=sum(s.gamma for s in steps),
                      accepted=sum(s.n_accepted for s in steps), acceptance_rate=None,
                      mean_accepted_length=new / len(steps), per_position_acceptance=[], wall_seconds=wall,
                      prefill_seconds=prefill, draft_seconds=sum(s.draft_ms for s in steps) / 1e3,
                      verify_seconds=sum(s.verify_ms for s in steps) / 1e3, tokens_per_second=new / wall,
                      cost_ratio=None)


@pytest.mark.quick
def test_histogram_counts_each_accepted_length_and_leaves_out_steps_with_no_draft():
    steps = [step(4, 0), step(4, 2), step(4, 2), step(4, 4), step(0, 0)]
    assert accepted_length_histogram(steps, gamma=4) == [1, 0, 2, 0, 1]
    assert accepted_length_histogram([step(0, 0)] * 3, gamma=4) == [0] * 5  # control: plain steps count nowhere


@pytest.mark.quick
def test_histogram_grows_for_a_step_that_accepted_more_than_gamma():
    assert accepted_length_histogram([step(6, 6)], gamma=4) == [0, 0, 0, 0, 0, 0, 1]


@pytest.mark.quick
def test_oracle_tau_is_each_steps_drafts_plus_one():
    # a chain of 4 everywhere: 5; a step that drafted 2 (the token limit, or adaptive's choice) gives 3; a step
    # with no draft gives 1
    assert oracle_tokens_per_step([step(4, 1), step(4, 0)], gamma=4) == 5
    assert oracle_tokens_per_step([step(4, 1), step(2, 0), step(0, 0)], gamma=4) == pytest.approx((5 + 3 + 1) / 3)


@pytest.mark.quick
def test_oracle_tau_of_a_tree_step_is_its_depth_bound():
    # the record shows a line of 2, the tree was drafted to depth gamma = 5
    assert oracle_tokens_per_step([step(2, 2, tree_size=12)], gamma=5) == 6
    assert oracle_tokens_per_step([step(2, 2, tree_size=0)], gamma=5) == 3  # control: a chain of 2


@pytest.mark.quick
def test_at_the_runs_own_tau_the_projection_is_the_measured_wall():
    steps = [step(4, 1), step(4, 3), step(4, 0), step(4, 4)]  # 2 + 4 + 1 + 5 = 12 tokens in 4 steps
    figures = oracle_figures(steps, metrics_of(steps, wall=0.1, prefill=0.02), gamma=4, plain_wall_seconds=0.3)
    assert figures.tau == 3
    assert projected_wall(12, 3, (0.1 - 0.02) / 4, 0.02) == pytest.approx(0.1)
    assert figures.speedup == pytest.approx(3.0)
    # oracle: 5 tokens a step, so 12 / 5 steps of 20 ms after the 20 ms prefill
    assert figures.oracle_tau == 5
    assert figures.oracle_speedup == pytest.approx(0.3 / (0.02 + 12 / 5 * 0.02))
    assert figures.verify_share == pytest.approx(0.016 / 0.1)
    assert (figures.draft_ms_per_step, figures.verify_ms_per_step) == pytest.approx((1.0, 4.0))
    assert figures.rest_ms_per_step == pytest.approx(20 - 5)
    assert figures.accepted_lengths == [1, 1, 0, 1, 1]


@pytest.mark.quick
def test_a_run_whose_drafts_were_all_accepted_is_the_oracle():
    steps = [step(4, 4)] * 3
    figures = oracle_figures(steps, metrics_of(steps, wall=0.07, prefill=0.01), gamma=4, plain_wall_seconds=0.2)
    assert figures.oracle_tau == figures.tau == 5
    assert figures.oracle_speedup == pytest.approx(figures.speedup)


@pytest.mark.quick
def test_no_plain_run_gives_no_speedups_but_the_rest():
    steps = [step(4, 1)]
    figures = oracle_figures(steps, metrics_of(steps, wall=0.05, prefill=0.01), gamma=4, plain_wall_seconds=None)
    assert figures.speedup is None and figures.oracle_speedup is None
    assert figures.oracle_tau == 5 and figures.accepted_lengths == [0, 1, 0, 0, 0]


def test_on_real_runs_the_target_as_its_own_drafter_is_the_oracle_and_a_perturbed_one_is_not(tiny_target,
                                                                                              tiny_drafter):
    settings = DecodeSettings(max_new_tokens=24, gamma=4, stop_at_eos=False)
    prompt = [1, 2, 3, 4]
    plain = run_once(tiny_target, PlainProposer(), prompt, settings, detail=False)
    runs = {name: run_once(tiny_target, ModelDrafter(model.model, tiny_target.vocab_size), prompt, settings,
                           detail=False) for name, model in (("self", tiny_target), ("perturbed", tiny_drafter))}
    figures = {name: oracle_figures(run.steps, run.metrics, 4, plain.metrics.wall_seconds)
               for name, run in runs.items()}
    assert figures["self"].oracle_tau == pytest.approx(figures["self"].tau)  # the last step may be cut short
    assert figures["self"].accepted_lengths[-1] == len(runs["self"].steps) - 1
    assert figures["perturbed"].oracle_tau > figures["perturbed"].tau  # control: rejections open a gap
    assert sum(figures["perturbed"].accepted_lengths) == sum(s.gamma > 0 for s in runs["perturbed"].steps)
    for name, run in runs.items():  # the projection at the run's tau is its measured speedup
        f = figures[name]
        assert f.speedup == pytest.approx(plain.metrics.wall_seconds / run.metrics.wall_seconds)
        assert 0 < f.verify_share < 1
