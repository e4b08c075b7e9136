"""The plausibility checks: each with a figure it must doubt and one it must let through."""
import pytest

from specviz.measure.plausibility import (BUSY, batch_doubt, cost_doubt, noise_note, speedup_doubt, step_durations,
    typical_seconds, wider_cheaper)

pytestmark = pytest.mark.quick

# a quiet run: plain steps 25 ms, speculative steps 35 ms (gamma 4), tau 3.5, first steps with the prefill
PLAIN = [0.060] + [0.025] * 95
SPEC = [0.070] + [0.035] * 26
KINDS = [4] * 27
QUIET_SPEEDUP = sum(PLAIN) / sum(SPEC)


def test_typical_seconds_takes_each_kind_at_its_median_and_the_first_step_as_measured():
    durations = [0.5, 0.02, 0.02, 1.0, 0.04, 0.04, 0.04]  # one burst (1.0) in a step of kind 0
    kinds = [4, 0, 0, 0, 4, 4, 4]
    assert typical_seconds(durations, kinds) == pytest.approx(0.5 + 3 * 0.02 + 3 * 0.04)
    assert typical_seconds([], []) == 0.0


def test_step_durations_from_the_elapsed_times():
    assert step_durations([0.5, 0.7, 1.0]) == pytest.approx([0.5, 0.2, 0.3])


def test_a_quiet_race_is_not_doubted():
    assert 2.4 < QUIET_SPEEDUP < 3.5
    assert speedup_doubt(QUIET_SPEEDUP, 3.55, PLAIN, SPEC, KINDS) is None


def test_a_speedup_above_tau_is_doubted():
    # plain measured at half its speed, the case: 5.3x with tau 3.5
    slow_plain = [d * 2 for d in PLAIN]
    reason = speedup_doubt(sum(slow_plain) / sum(SPEC), 3.55, slow_plain, SPEC, KINDS)
    assert reason is not None and "more than τ = 3.55" in reason


def test_a_speedup_just_above_tau_is_doubted_though_its_steps_agree():
    # plain and speculative steps that agree with their medians, the total a hair above tau: no tolerance there
    plain = [0.060] + [0.0350] * 95
    spec = [0.070] + [0.0350] * 26
    speedup = sum(plain) / sum(spec)
    tau = speedup / 1.01
    reason = speedup_doubt(speedup, tau, plain, spec, KINDS)
    assert reason is not None and f"more than τ = {tau:.2f}" in reason
    assert speedup_doubt(speedup, speedup * 1.01, plain, spec, KINDS) is None  # control: just below tau


def test_plain_steps_slower_than_speculative_steps_are_doubted_below_tau_too():
    # plain decoding slowed throughout, and a stall in the speculative run that brings the total under tau:
    # the first check lets it through, the steps' medians do not
    slow_plain = [0.060] + [0.050] * 95
    spec = [0.070] + [0.035] * 10 + [0.8]
    speedup = sum(slow_plain) / sum(spec)
    assert speedup < 8
    reason = speedup_doubt(speedup, 8.0, slow_plain, spec, [7] * 12)
    assert reason is not None and "plain decoding took longer than a speculative step" in reason


def test_a_burst_in_one_run_is_doubted_in_either_direction():
    burst_plain = PLAIN[:50] + [1.5] + PLAIN[51:]  # plain hit by a 1.5 s stall: speedup overstated
    over = sum(burst_plain) / sum(SPEC)
    assert over < 3.55 * 1.15  # below tau: the first check lets it through
    assert "median time" in speedup_doubt(over, 3.55, burst_plain, SPEC, KINDS)
    burst_spec = SPEC[:10] + [1.0] + SPEC[11:]  # the speculative run hit: understated
    under = sum(PLAIN) / sum(burst_spec)
    assert "median time" in speedup_doubt(under, 3.55, PLAIN, burst_spec, KINDS)


def test_steps_of_different_kinds_are_not_a_burst():
    # adaptive or ngram: some steps draft nothing (cheap), others 4 (dearer); no burst, no doubt
    spec = [0.07] + [0.012, 0.035] * 20
    kinds = [4] + [0, 4] * 20
    plain = [0.06] + [0.025] * 80
    # tau 2.5: each step of 4 drafts wrote 4 tokens (3 accepted and the next), each step of none wrote 1
    assert speedup_doubt(sum(plain) / sum(spec), 2.5, plain, spec, kinds) is None


def test_a_wider_forward_measured_cheaper_is_doubted():
    quiet = [(1, 40.0), (2, 41.0), (4, 45.0), (8, 52.0), (16, 75.0)]
    assert wider_cheaper(quiet) is None and cost_doubt(quiet) is None
    busy = [(1, 210.4), (2, 41.0), (4, 45.0), (8, 52.0), (16, 75.6)]  # lesson 3 under load: K = 1 slowed
    assert wider_cheaper(busy) == (1, 2)
    reason = cost_doubt(busy)
    assert "a forward of 2 positions took 41.0 ms, less than one of 1 (210.4 ms)" in reason


def test_a_flat_curve_within_the_tolerance_is_not_doubted():
    gpu = [(1, 1.00), (4, 0.97), (16, 1.08)]  # a GPU's forward barely grows: small dips are noise
    assert cost_doubt(gpu) is None


def test_batch_figures_above_tau_or_with_a_cheap_verify_are_doubted():
    assert batch_doubt(1.4, 2.5, 1.3, 4) is None
    assert "more than τ = 1.20" in batch_doubt(1.9, 1.2, 1.3, 2)
    assert "verify pass measured 0.60× a plain step" in batch_doubt(1.1, 2.5, 0.6, 8)


def test_the_note_says_the_machine_was_busy_and_why():
    note = noise_note("a forward of 2 positions took 41.0 ms")
    assert note.startswith(BUSY) and "41.0 ms" in note and "again" in note


def test_the_bound_counts_the_drafting_time():
    """Lesson 4's 2.05x (eagle, tau 2.46, gamma 4, c 0.082) passed a bound of tau alone; each step also drafted, so
    no run could beat tau / (1 + gamma c) = 1.85x."""
    from specviz.measure.plausibility import drafting_share, speedup_ceiling

    assert speedup_ceiling(2.46, 4 * 0.082) == pytest.approx(1.852, abs=1e-3)
    assert drafting_share(0.3, 1.2) == 0.25 and drafting_share(0.3, 0.0) == 0.0
    plain = [0.060] + [0.050] * 60  # 61 plain tokens
    spec = [0.070] + [0.050] * 24  # 25 steps of tau 2.46, each step's median as plain's: consistent steps
    speedup = sum(plain) / sum(spec)
    assert 1.85 < speedup < 2.46
    reason = speedup_doubt(speedup, 2.46, plain, spec, [4] * 25, drafting=4 * 0.082)
    assert reason is not None and "τ / (1 + γc) = 2.46 / (1 + 0.33) = 1.85" in reason
    assert speedup_doubt(speedup, 2.46, plain, spec, [4] * 25) is None  # the control: tau alone lets it through
