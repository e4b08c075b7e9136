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
    gpu = lessons.VerifyCost("cuda (default, bfloat16)", points([(1, 0.1), (16, 0.105)]), 270_000_000, 3350.0, "spec sheet")
    told = verify_cost_sentence(gpu)
    assert "barely grows" in told and "reading the weights sets a forward's time" in told and GPU_MEASUREMENT not in told
    assert "which holds on this device" in CLAIM  # the claim says it is measured, not that it holds everywhere


def test_the_batch_line_says_what_binds_a_forward_here_from_its_measurement():
    cpu = bound_sentence([{"batch_size": 1, "ratio": 1.9}, {"batch_size": 4, "ratio": 3.1}])
    assert "1.90× a plain step" in cpu and "the arithmetic already binds" in cpu
    gpu = bound_sentence([{"batch_size": 1, "ratio": 1.05}])
    assert "reading the weights binds" in gpu and "arithmetic" not in gpu
    assert bound_sentence([{"batch_size": 1, "ratio": 0.5}], {1: "noisy"}) == ""  # a noisy figure tells nothing
    assert "which holds on this device" in BATCH_CLAIM


def test_lesson_4_explains_a_speedup_far_below_the_expected_one_in_its_row():
    from specviz.lessons.speedup import AcceptanceRow, acceptance_rows, acceptance_sentence

    rows = [AcceptanceRow("code", "medusa", 4, 0.45, 1.9, 0.03, 0.22, 1.17, 32),
            AcceptanceRow("code", "ngram", 4, 0.6, 2.4, 0.01, 1.3, 1.5, 32)]
    cells = acceptance_rows(rows)
    assert cells[0][5] == "0.22× (far below: see the note)" and cells[1][5] == "1.30×"  # the control: near its expected
    sentence = acceptance_sentence(rows)
    assert "medusa on code: 0.22× against 1.17×" in sentence and "hidden states" in sentence
    noisy = AcceptanceRow("code", "medusa", 4, 0.45, 1.9, 0.03, 0.22, 1.17, 32, doubt="plain was slowed")
    assert acceptance_rows([noisy])[0][5] == "0.22× (noisy)"  # a noisy figure carries its own note, not this one
