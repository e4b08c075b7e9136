"""The Learn tab (specviz.ui.learn): its pure functions, records in and widget values out (figures validated by
plotly; sentences must name the figure the record measured), and the /distribution endpoint on a served app."""
from collections import Counter

import plotly.graph_objects as go
import pytest

from specviz import lessons
from specviz.lessons.common import p_text
from specviz.records.schema import TokenKind, TokenRecord
from specviz.ui import learn, learn_figures, learn_runs



def _valid(fig: dict) -> dict:
    go.Figure(fig)  # raises on anything plotly does not accept
    return fig


def _distribution(wrong_counts: Counter) -> lessons.Distribution:
    record = lessons.Distribution("p", "medusa", 0.7, 200, lessons.Histogram("plain", Counter({1: 120, 2: 80})),
                                  lessons.Histogram("medusa", Counter({1: 118, 2: 82})),
                                  lessons.Histogram("wrong verifier", wrong_counts), {1: 0.6, 2: 0.4},
                                  {1: "cat", 2: "<dog>"})
    return record


@pytest.mark.quick
def test_distribution_widgets_say_pass_and_caught():
    record = _distribution(Counter({1: 170, 2: 30}))
    fig = _valid(learn_figures.distribution_figure(record))
    assert [len(t["y"]) for t in fig["data"][:3]] == [3, 3, 3]  # two tokens and "other"
    assert "&lt;dog&gt;" in fig["data"][0]["x"][1]  # token text shown as characters
    sentence = lessons.distribution_sentence(record)
    assert record.passed and record.caught
    assert p_text(record.p_value) in sentence and "**caught**" in sentence
    # a p-value of exactly 0 (a token the target never writes) is a failure, not a missing value
    record.exact = {1: 1.0}
    assert record.exact_p_value == 0.0 and not record.passed and record.caught
    # control: a wrong verifier whose output happens to match is reported as not caught
    assert "not caught" in lessons.distribution_sentence(_distribution(Counter({1: 119, 2: 81})))
    assert lessons.distribution_sentence(None) == "" and _valid(learn_figures.distribution_figure(None))


@pytest.mark.quick
def test_verify_cost_widgets_name_the_ratio_and_the_stated_floor():
    points = [lessons.CostPoint("positions", k, ms, 128) for k, ms in [(1, 40.0), (4, 60.0), (8, 100.0)]]
    record = lessons.VerifyCost("cpu (x)", points, 540_000_000, 20.0, "assumed for a CPU (not measured)")
    fig = _valid(learn_figures.verify_cost_figure(record))
    assert fig["data"][1]["y"][0] == pytest.approx(27.0)
    sentence = lessons.verify_cost_sentence(record)
    assert "2.50× the time of one" in sentence and "27.0 ms" in sentence and "assumed" in sentence
    assert "grows with K" in sentence and "too low" not in sentence
    # control: a forward faster than the assumed floor says the assumption was too low
    fast = lessons.VerifyCost("cpu (x)",
                              [lessons.CostPoint("positions", k, ms, 128) for k, ms in [(1, 15.0), (8, 16.5)]],
                              540_000_000, 20.0, "assumed")
    assert "at least 36 GB/s" in lessons.verify_cost_sentence(fast) and "barely grows" in lessons.verify_cost_sentence(
        fast
    )


@pytest.mark.quick
def test_a_verify_cost_the_machine_slowed_is_not_told_as_a_story():
    """Lesson 3 under load: one position measured at 210.4 ms and sixteen at 75.6 ms. No forward of sixteen is
    cheaper than one of one: the sentence says the figure is noisy instead of what it would mean."""
    from specviz.measure.plausibility import BUSY
    from specviz.ui.tabs import cost_sentence

    busy = [lessons.CostPoint("positions", k, ms, 128) for k, ms in [(1, 210.4), (4, 60.2), (8, 66.0), (16, 75.6)]]
    record = lessons.VerifyCost("cpu (x)", busy, 540_000_000, 20.0, "assumed")
    sentence = lessons.verify_cost_sentence(record)
    assert BUSY in sentence and "barely grows" not in sentence and "grows with K" not in sentence
    quiet = [lessons.CostPoint("positions", k, ms, 128) for k, ms in [(1, 56.4), (4, 60.2), (8, 66.0), (16, 75.6)]]
    told = lessons.verify_cost_sentence(lessons.VerifyCost("cpu (x)", quiet, 540_000_000, 20.0, "assumed"))
    assert BUSY not in told and "1.34× the time of one" in told and "barely grows" in told
    # the Cost curve tab tells the same measurement the same way
    assert cost_sentence(quiet).split(" The weights")[0] in told and BUSY in cost_sentence(busy)


@pytest.mark.quick
def test_acceptance_widgets():
    rows = [lessons.AcceptanceRow("code", "eagle", 4, 0.8, 3.2, 0.1, 1.6, 2.4, 32),
            lessons.AcceptanceRow("code", "ngram", 4, None, 1.0, None, 0.9, None, 32)]
    table = lessons.acceptance_rows(rows)
    assert table[0][6] == "1.60×" and "Li et al. 2024" in table[0][8] and table[1][2] == "–"
    fig = _valid(learn_figures.what_if_figure(rows, 0.5, 4, 0.1))
    assert fig["data"][1]["y"][0] == pytest.approx(lessons.expected_speedup(0.5, 4, 0.1))
    assert fig["data"][2]["x"] == [0.8]  # runs that drafted nothing have no alpha to place
    sentence = lessons.acceptance_sentence(rows)
    assert "1.60×" in sentence and "0.90×" in sentence


@pytest.mark.quick
def test_drafter_and_mechanic_widgets():
    rows = [lessons.DrafterCost("ngram", 0, 0, 135_000_000, 540_000_000, 0.2, 1.3),
            lessons.DrafterCost("retrieval", 0, 100_000_000, 135_000_000, 540_000_000, 0.2, 1.7),
            lessons.DrafterCost("eagle", 20_000_000, 80_000_000, 135_000_000, 540_000_000, 0.6, 2.5)]
    assert lessons.drafter_rows(rows)[2][3] == "14.8%"
    sentence = lessons.drafter_sentence(rows)
    assert "τ 2.50" in sentence and "80.0 MB extra (14.8% of the target)" in sentence
    assert "Nothing extra at all: ngram." in sentence and "retrieval holds no weights but 100.0 MB" in sentence
    tokens = [TokenRecord(1, "a", TokenKind.ACCEPTED, 0), TokenRecord(2, "b", TokenKind.REJECTED, 0),
              TokenRecord(3, "c", TokenKind.RESAMPLED, 0)]
    record = lessons.Mechanic("eagle", "p", None, [lessons.MechanicStep(0, ["a", "b"], 1, "c", 2, 30.0)], tokens)
    assert 'class="sv-lesson-steps"' in learn_figures.mechanic_html(
        record
    ) and "tok-rejected" in learn_figures.mechanic_html(record)
    assert lessons.mechanic_rows(record)[0][2] == "1 of 2"
    assert "2.00 tokens per forward" in lessons.mechanic_sentence(record)


def test_distribution_endpoint_returns_both_histograms_and_p_values(app_url):
    from gradio_client import Client

    result = Client(app_url, verbose=False).predict(prompt="Once upon a time, there was a", method="medusa", runs=20,
                                                    temperature=1.0, seed=0, wrong=True, api_name="/distribution")
    for arm in ("plain", "speculative", "wrong"):
        assert sum(result[arm]["counts"].values()) == result[arm]["runs"] == 20
    assert result["speculative"]["drafted"] == 20  # one drafted token per run, the one tested
    assert 0 <= result["p_value"] <= 1 and 0 <= result["wrong_exact_p_value"] <= 1
    with pytest.raises(Exception, match="runs must be between"):
        Client(app_url, verbose=False).predict(prompt="x", runs=5, api_name="/distribution")


def _selects_a_tab(with_tabs: bool) -> list:
    """The events of a built Learn tab whose output is the app's gr.Tabs, and what they select."""
    import gradio as gr

    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("Run", id=learn.RUN_TAB):
                fields = [gr.Textbox(), gr.Textbox(), gr.Number(), gr.Number(), gr.Number(), gr.Number()]
                target = gr.Textbox()
            with gr.Tab("Learn", id="learn"):
                learn.LearnTab().build(target, fields, {}, ["a prompt"], tabs if with_tabs else None)
    return [fn for dep, fn in zip(demo.config["dependencies"], demo.fns.values()) if dep["outputs"] == [tabs._id]]


@pytest.mark.quick
def test_open_in_the_run_tab_selects_the_run_tab_by_its_id():
    selectors = _selects_a_tab(True)
    assert len(selectors) == 6  # one "Open in the Run tab" a lesson with a frame (lesson 5 has the Batch tab's)
    assert all(fn.fn().selected == learn.RUN_TAB for fn in selectors)
    assert _selects_a_tab(False) == []  # control: without the app's tabs, nothing selects one


@pytest.mark.quick
def test_a_lesson_midway_says_it_is_partial_and_gives_no_verdict():
    """Midway through lesson 2 the wrong verifier is often not caught yet: the sentence must read as partial,
    not as the result ("not caught at this many runs")."""
    record = _distribution(Counter({1: 119, 2: 81}))  # an uncaught wrong verifier
    midway = lessons.distribution_sentence(record, False)
    assert midway.startswith("**Partial") and "not caught at this many runs" not in midway
    assert "no difference found" not in midway and "not caught yet" in midway
    final = lessons.distribution_sentence(record, True)  # control: the finished lesson gives its verdict
    assert "Partial" not in final and "not caught at this many runs" in final


@pytest.mark.quick
def test_the_status_line_counts_n_of_n_and_the_time_left():
    from specviz.lessons.progress import progress_of, time_left

    record = _distribution(Counter({1: 20, 2: 10}))  # 200 seeds planned: 200 plain, 200 medusa, 30 wrong so far
    done = progress_of(record)
    assert (done.done, done.total) == (430, 600) and "200 seeds each" in str(done)
    # 30 runs in the last 10 s: 170 left take about 57 s, at the pace of the last half minute (not of the start)
    samples = [(0.0, 0), (60.0, 400), (90.0, 400), (100.0, 430)]
    assert time_left(samples, done.total) == pytest.approx(170 / (30 / 10), rel=0.01)
    assert time_left(samples[:1], done.total) is None and time_left(samples, None) is None
    html = learn_runs.measuring_html(done, samples, 100.0)
    assert "430 of 600 runs" in html and "s left" in html and "Partial" in html
    assert learn_runs.partial_note(record).startswith(" What is shown is partial")


@pytest.mark.quick
def test_every_lesson_record_has_a_count():
    from specviz.lessons.progress import progress_of

    cost = lessons.VerifyCost("cpu (x)", [lessons.CostPoint("positions", 1, 10.0, 128)], 1, 1.0, "assumed", 7)
    assert (progress_of(cost).done, progress_of(cost).total) == (1, 7)
    row = lessons.AcceptanceRow("code", "ngram", 4, 0.5, 2.0, 0.0, 1.5, 1.6, 32)
    assert progress_of([row]).total == 18 and progress_of([row]).done == 1  # six methods on three prompts
    bugs = lessons.bugs.Bugs("p", "eagle", 1.0, 150, {}, [], seeds=60)
    assert (progress_of(bugs).done, progress_of(bugs).total) == (60, 150)
    bugs.seeds = 400  # past the verdict's seeds while a wrong verifier is not caught: no total to promise
    assert progress_of(bugs).total is None and "400 seeds so far" in str(progress_of(bugs))


@pytest.mark.quick
def test_lesson_6_says_what_drafting_in_one_forward_changes():
    target = (135_000_000, 540_000_000)
    rows = [lessons.DrafterCost("eagle", 20_000_000, 80_000_000, *target, 0.6, 2.5, 6.2),
            lessons.DrafterCost("early-exit", 0, 0, *target, 0.1, 1.1, 22.0),
            lessons.DrafterCost("dflash", 18_000_000, 147_000_000, *target, 0.6, 2.4, 3.2)]
    sentence = lessons.drafter_sentence(rows)
    assert "dflash drafts the whole draft in one forward: 3.20 ms a step, where eagle, one forward a token, " \
           "takes 6.20 ms" in sentence
    assert lessons.drafter_rows(rows)[2][6] == 3.2
    saved = [lessons.DrafterCost("eagle", 1, 1, *target, 0.6, 2.5), lessons.DrafterCost("dflash", 1, 1, *target, 0.6,
                                                                                          2.4)]
    assert "one forward:" not in lessons.drafter_sentence(saved)  # control: a record saved without the times
    assert lessons.drafter_rows(saved)[0][6] == "–"
