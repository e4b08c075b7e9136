"""One measurement, one story: lesson 3's and the Batch tab's sentences follow what this device measured, and a
noise note is about the figure shown in bold, never about another pair of points."""
import pytest

from specviz import lessons
from specviz.lessons.batch_size import CLAIM as BATCH_CLAIM
from specviz.lessons.batch_size import bound_sentence
from specviz.lessons.forward_cost import CLAIM, GPU_MEASUREMENT, curve_sentence, verify_cost_sentence
from specviz.measure.plausibility import BUSY

pytestmark = pytest.mark.quick


def points(pairs):
    return [lessons.CostPoint("positions", k, ms, 128) for k, ms in pairs]


def test_a_noisy_pair_elsewhere_is_not_told_as_the_bold_figures_note():
    # the bold figure (16 against 1: 2.79x) passed; 3 positions measured cheaper than 2
    sentence = curve_sentence(points([(1, 100.0), (2, 150.0), (3, 120.0), (16, 279.0)]))
    assert "**2.79× the time of one" in sentence and BUSY not in sentence
    assert "elsewhere on the chart" in sentence and "3 positions took 120.0 ms" in sentence
    # the control: a pair with one of the bold figure's points is the bold figure's own note
    own = curve_sentence(points([(1, 100.0), (2, 150.0), (3, 160.0), (16, 80.0)]))
    assert BUSY in own and "16 positions took 80.0 ms" in own


def test_lesson_3_on_a_cpu_says_what_the_cpu_measured_and_where_the_claim_holds():
    record = lessons.VerifyCost("cpu (default, float32)", points([(1, 105.0), (4, 150.0), (16, 293.0)]),
                                540_000_000, 20.0, "assumed for a CPU (not measured)")
    sentence = verify_cost_sentence(record)
    assert "2.79× the time of one" in sentence and "grows with K" in sentence
    assert "one position took 105.0 ms, 3.9× that floor" in sentence and "reading the weights is not" in sentence
    assert GPU_MEASUREMENT in sentence
    # the control: a GPU whose forward sits on its floor is told the other way, with no pointer elsewhere
    gpu = lessons.VerifyCost("cuda (default, bfloat16)", points([(1, 0.1), (16, 0.105)]), 270_000_000, 3350.0,
                             "spec sheet")
    told = verify_cost_sentence(gpu)
    assert (
        "barely grows" in told and "reading the weights sets a forward's time" in told and GPU_MEASUREMENT not in told
    )
    assert "which holds on this device" in CLAIM  # the claim says it is measured, not that it holds everywhere


def test_the_batch_line_says_what_binds_a_forward_here_from_its_measurement():
    cpu = bound_sentence([{"batch_size": 1, "positions": 5, "ratio": 3.4}, {"batch_size": 4, "ratio": 3.1}])
    assert "5 positions measured 3.40×" in cpu and "the arithmetic binds a forward" in cpu
    gpu = bound_sentence([{"batch_size": 1, "positions": 5, "ratio": 1.05}])
    assert "reading the weights, not the arithmetic, binds" in gpu and "nearly free" in gpu
    assert bound_sentence([{"batch_size": 1, "ratio": 0.5}], {1: "noisy"}) == ""  # a noisy figure tells nothing
    assert "which holds on this device" in BATCH_CLAIM


def test_lesson_4_explains_a_speedup_far_below_the_expected_one_in_its_row():
    from specviz.lessons.speedup import AcceptanceRow, acceptance_rows, acceptance_sentence

    rows = [AcceptanceRow("code", "medusa", 4, 0.45, 1.9, 0.03, 0.22, 1.17, 32),
            AcceptanceRow("code", "ngram", 4, 0.6, 2.4, 0.01, 1.3, 1.5, 32)]
    cells = acceptance_rows(rows)
    assert cells[0][6] == "0.22× (far below: see the note)" and cells[1][6] == "1.30×"  # the control: near its expected
    sentence = acceptance_sentence(rows)
    assert "medusa on code: 0.22× against 1.17×" in sentence and "hidden states" in sentence
    noisy = AcceptanceRow("code", "medusa", 4, 0.45, 1.9, 0.03, 0.22, 1.17, 32, doubt="plain was slowed")
    assert acceptance_rows([noisy])[0][6] == "0.22× (noisy)"  # a noisy figure carries its own note, not this one


def test_lessons_3_and_5_tell_the_same_machine_the_same_way():
    """The 2-core CPU measured 16 positions at 2.12x one (lesson 3) and a verify pass of 5 at 1.19x a plain step
    (lesson 5) minutes apart; read by one rule (the cost each extra position adds) the two agree."""
    from specviz.measure.binding import what_binds

    lesson_3 = curve_sentence(points([(1, 157.5), (16, 334.1)]))
    lesson_5 = bound_sentence([{"batch_size": 1, "positions": 5, "ratio": 1.19}])
    assert what_binds(2.12, 16).kind == what_binds(1.19, 5).kind == "mixed"
    verdict = "neither the weight reads nor the arithmetic binds a forward alone"
    assert verdict in lesson_3 and verdict in lesson_5
    assert "nearly free" not in lesson_5 and "each checked draft costs" not in lesson_3  # the old two stories
    # the control: a GPU-like curve and a CPU whose every position costs a forward are told apart
    assert what_binds(1.08, 16).kind == "weights" and what_binds(4.6, 5).kind == "arithmetic"
    assert "nearly free" in curve_sentence(points([(1, 1.0), (16, 1.08)]))


def test_a_batch_verdict_resting_on_a_speedup_near_1x_is_marked_noisy_with_why():
    from specviz.lessons.batch_size import batch_sentence, unsettled
    from specviz.measure.plausibility import UNSETTLED

    def summary(*speedups):
        return [{"method": "retrieval", "batch_size": b, "speedup": x, "mean_accepted_length": 2.0, "path": "batched"}
                for b, x in zip((1, 2, 4, 8), speedups)]

    # the two runs the Batch tab gave minutes apart: "stops paying at batch 4" and "still pays at batch 8"
    stops, pays = summary(1.5, 1.3, 0.97, 0.9), summary(1.5, 1.3, 1.04, 1.02)
    assert "0.97× at batch 4" in unsettled(stops, "retrieval") and UNSETTLED in batch_sentence(stops, "retrieval")
    assert "1.04× at batch 4, 1.02× at batch 8" in unsettled(pays, "retrieval")
    # the control: a verdict far from 1x either way is settled
    assert unsettled(summary(1.5, 1.3, 0.6, 0.5), "retrieval") is None
    assert UNSETTLED not in batch_sentence(summary(1.8, 1.6, 1.5, 1.4), "retrieval")


def test_lesson_4_feeds_the_formula_the_acceptance_it_means():
    """The formula's alpha is a per-token acceptance: a draft after a step's first rejection is never tested.
    With alpha = 0.6 exactly (i.i.d.), accepted / drafted reads lower and the formula then expects too little."""
    import random
    from types import SimpleNamespace

    from specviz.records.metrics import tested_acceptance
    from specviz.rule.theory import expected_tokens_per_step

    rng, gamma, steps = random.Random(0), 4, []
    for _ in range(20000):
        n = 0
        while n < gamma and rng.random() < 0.6:
            n += 1
        steps.append(SimpleNamespace(gamma=gamma, n_accepted=n, tree_size=0, positions=[]))
    tau = 1 + sum(s.n_accepted for s in steps) / len(steps)
    share = sum(s.n_accepted for s in steps) / (gamma * len(steps))
    alpha = tested_acceptance(steps)
    assert alpha == pytest.approx(0.6, abs=0.01)
    assert expected_tokens_per_step(alpha, gamma) == pytest.approx(tau, rel=0.01)  # the formula gives the measured tau
    assert expected_tokens_per_step(share, gamma) < tau * 0.85  # the control: the share of drafts accepted does not
    assert tested_acceptance([SimpleNamespace(gamma=0, n_accepted=0, tree_size=0, positions=[])]) is None


def test_every_lesson_shows_what_it_asks_the_model():
    from specviz.lessons.catalogue import LESSONS, SETTINGS, prompt_line
    from specviz.lessons.common import PROMPTS

    lines = {lesson.key: prompt_line(lesson) for lesson in LESSONS}
    assert all(line.startswith("Prompt") for line in lines.values()), lines
    for key in ("mechanic", "exact", "drafters", "bugs"):
        assert f"“{SETTINGS[key]['prompt']}”" in lines[key] and "chat turn" in lines[key]
    assert all(text in lines["acceptance"] and text in lines["batch"] for text in PROMPTS.values())
    assert "none" in lines["cost"]  # the control: the one lesson with no prompt says so rather than show another's


def test_lesson_2_s_greedy_and_sampled_halves_send_one_prompt_the_same_way(monkeypatch):
    from specviz.lessons import exactness

    asked = []
    monkeypatch.setattr(exactness, "greedy_side_by_side", lambda *a, chat, **k: asked.append(("greedy", chat)) or "g")
    monkeypatch.setattr(exactness, "distribution", lambda *a, chat=False, **k: asked.append(("sampled", chat))
                        or iter(()))
    list(exactness.unchanged(None, "Once upon a time, there was a"))
    assert asked == [("greedy", True), ("sampled", True)]
