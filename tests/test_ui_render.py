"""The app's renderer and chart functions on hand-built step records: no model, no server."""
import math
from html.parser import HTMLParser
from pathlib import Path

import pytest

from specviz.measure.cost_curve import CostPoint
from specviz.records.metrics import summarize
from specviz.records.schema import DraftPosition, StepRecord, TokenKind, TokenRecord, TopTokens
from specviz.rule.theory import expected_speedup, expected_tokens_per_step
from specviz.ui import charts, readouts, render, view

pytestmark = pytest.mark.quick

INJECTIONS = ["${alert(1)}", "<img src=x onerror=alert(1)>", "`${document.cookie}`", "<script>alert(1)</script>"]


def position(token_id, text, p, q, accepted, reached=True, u=None):
    return DraftPosition(token_id=token_id, text=text, q=q, p=p, accept_prob=min(1.0, p / q) if q else p, u=u,
                         accepted=accepted, reached=reached, p_top=TopTokens([token_id, 99], [p, 1 - p]),
                         q_top=TopTokens([token_id, 98], [q, 1 - q]) if q else None)


def make_step(index, drafts, next_text, next_kind, total_before, draft_ms=2.0, verify_ms=10.0, elapsed=None):
    """drafts: (text, accepted) in order; the first rejected one is the last the verifier reached."""
    positions, tokens = [], []
    rejected_seen = False
    for i, (text, accepted) in enumerate(drafts):
        reached = not rejected_seen
        positions.append(position(10 + i, text, p=0.8 if accepted else 0.1, q=0.5, accepted=accepted, reached=reached,
                                  u=0.3 if accepted else (0.9 if reached else None)))
        rejected_seen = rejected_seen or not accepted
        kind = TokenKind.ACCEPTED if accepted else TokenKind.REJECTED
        pos = positions[-1]
        tokens.append(TokenRecord(id=pos.token_id, text=text, kind=kind, step=index, p=pos.p, q=pos.q,
                                  accept_prob=pos.accept_prob, u=pos.u))
    n = sum(accepted for _, accepted in drafts)
    next_token = TokenRecord(id=50 + index, text=next_text, kind=next_kind, step=index, p=0.6)
    tokens.append(next_token)
    return StepRecord(index=index, gamma=len(drafts), positions=positions, n_accepted=n, next_token=next_token,
                      next_top=TopTokens([50 + index, 7], [0.6, 0.4]), tokens=tokens, draft_ms=draft_ms,
                      verify_ms=verify_ms, elapsed_s=elapsed if elapsed is not None else 0.1 * (index + 1),
                      emitted=n + 1, total_emitted=total_before + n + 1)


@pytest.fixture
def steps():
    """Step 0: 2 accepted, 1 rejected, 1 not reached, resampled. Step 1: all 4 accepted, bonus. Step 2: 0 accepted."""
    return [
        make_step(0, [(" The", True), (" cat", True), (" sat", False), (" on", False)], " is", TokenKind.RESAMPLED, 0),
        make_step(1, [(" a", True), (" very", True), (" good", True), (" cat", True)], ".", TokenKind.BONUS, 3),
        make_step(2, [(INJECTIONS[0], False), (INJECTIONS[1], False), ("x", False), ("y", False)], INJECTIONS[1],
                  TokenKind.RESAMPLED, 8),
    ]


class _Spans(HTMLParser):
    """Collects (classes, attributes, text) of every token span, and every tag seen."""

    def __init__(self):
        super().__init__()
        self.spans, self.tags, self._open, self._depth = [], [], None, 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "span" and self._open is not None:
            self._depth += 1  # a token's own parts (its marks and plain text)
        elif tag == "span" and "tok" in (attrs.get("class") or "").split():
            self._open = [attrs["class"].split(), attrs, ""]

    def handle_data(self, data):
        if self._open is not None:
            self._open[2] += data

    def handle_endtag(self, tag):
        if tag == "span" and self._open is not None:
            if self._depth:
                self._depth -= 1
                return
            self.spans.append(tuple(self._open))
            self._open = None


def parse(html_text):
    parser = _Spans()
    parser.feed(html_text)
    return parser


def tokens_of(steps):
    return [t for s in steps for t in s.tokens]


def test_every_kind_has_its_class_and_text(steps):
    parsed = parse(render.token_view_html(tokens_of(steps), prompt="Hi"))
    kinds = [next(c[4:] for c in classes if c.startswith("tok-")) for classes, _, _ in parsed.spans]
    assert kinds == [t.kind.value for t in tokens_of(steps)]
    assert {"accepted", "rejected", "resampled", "bonus"} <= set(kinds)
    assert [text for _, _, text in parsed.spans] == [t.text for t in tokens_of(steps)]


def test_injection_strings_stay_text(steps):
    html_text = render.token_view_html(tokens_of(steps), prompt=" ".join(INJECTIONS), header=INJECTIONS[1])
    parsed = parse(html_text)
    assert set(parsed.tags) <= {"div", "span"}  # no img, no script
    assert "${" not in html_text and "`" not in html_text  # nothing a template literal could evaluate
    texts = [text for _, _, text in parsed.spans]
    assert INJECTIONS[0] in texts and INJECTIONS[1] in texts  # shown as the characters they are
    assert "<img" not in html_text and "<script" not in html_text


def test_escape_text_round_trips():
    import html
    for text in INJECTIONS + ["a & b", 'say "hi"', "{x}"]:
        escaped = render.escape_text(text)
        assert "<" not in escaped and "$" not in escaped and "{" not in escaped and "`" not in escaped
        assert html.unescape(escaped) == text


def tips_of(steps, sampling=True):
    """Each token's tip, with the verifier's reach as the view marks it (tok-untested)."""
    parsed = parse(render.token_view_html(tokens_of(steps), sampling=sampling))
    return [render.token_tip(token, sampling, reached="tok-untested" not in classes)
            for token, (classes, _, _) in zip(tokens_of(steps), parsed.spans)]


def test_tooltip_gives_kind_step_p_q_ratio_and_u(steps):
    tips = tips_of(steps)
    accepted_tip = tips[0]
    assert accepted_tip.startswith("accepted · step 0")
    assert "p = 0.800" in accepted_tip and "q = 0.500" in accepted_tip
    assert "min(1, p/q) = 1.000" in accepted_tip and "u = 0.300" in accepted_tip
    first_rejected, second_rejected = tips[2], tips[3]
    assert (
        "rejected · step 0" in first_rejected
        and "min(1, p/q) = 0.200" in first_rejected
        and "u = 0.900" in first_rejected
    )
    assert "not tested" in second_rejected and "not tested" not in first_rejected  # after the first rejection
    assert tips[4].startswith("resampled · step 0") and "residual" in tips[4]
    assert tips[9].startswith("bonus · step 1")


def test_a_tokens_numbers_are_its_data_attributes(steps):
    """The stylesheet composes the tip from them: p, q, min(1, p/q) as a, u; a number the token lacks is left out."""
    spans = parse(render.token_view_html(tokens_of(steps))).spans
    assert {k: spans[0][1].get(k) for k in ("data-p", "data-q", "data-a", "data-u")} == {
        "data-p": "0.800", "data-q": "0.500", "data-a": "1.000", "data-u": "0.300"}
    assert "data-u" not in spans[3][1] and "data-u" in spans[2][1]  # the untested draft was never drawn against
    resampled = spans[4][1]
    assert resampled["data-p"] == "0.600" and "data-q" not in resampled and "data-tip" not in resampled


def test_greedy_tooltip_explains_the_argmax_test(steps):
    tips = tips_of(steps, sampling=False)
    assert "greedy" in tips[0] and "u =" not in tips[0]
    assert tips[4].startswith("resampled") and "most probable" in tips[4] and "residual" not in tips[4]
    assert 'class="sv-output sv-greedy"' in render.token_view_html(tokens_of(steps), sampling=False)
    assert "sv-greedy" not in render.token_view_html(tokens_of(steps), sampling=True)


def test_step_groups_render_each_step_once_and_equal_a_full_render(steps):
    tokens = tokens_of(steps)
    groups = render.StepGroups()
    groups.add(steps[0].tokens)
    assert groups.html() == render.token_spans(tokens_of(steps[:1]))  # a run still going
    for step in steps[1:]:
        groups.add(step.tokens)
    assert len(groups) == len(steps)
    assert groups.html() == render.token_spans(tokens)
    assert groups.html(current_step=1) == render.token_spans(tokens, current_step=1)
    assert groups.html(current_step=1) != groups.html(current_step=2)  # control: the highlight moves
    cut = render.token_view_html([], spans=groups.html(current_step=1, upto_step=1))
    assert cut == render.token_view_html(tokens, current_step=1, upto_step=1)
    assert 'data-step="2"' not in cut and 'data-step="2"' in render.token_view_html(tokens)


def test_one_hot_drafter_tooltip():
    token = TokenRecord(id=1, text="a", kind=TokenKind.ACCEPTED, step=3, p=0.7, q=None, accept_prob=0.7, u=0.2)
    assert "one-hot" in render.token_tip(token)


def test_current_step_and_replay_cut(steps):
    parsed = parse(render.token_view_html(tokens_of(steps), current_step=1, upto_step=1))
    assert {int(attrs["data-step"]) for _, attrs, _ in parsed.spans} == {0, 1}
    current = [int(attrs["data-step"]) for classes, attrs, _ in parsed.spans if "sv-current" in classes]
    assert current and set(current) == {1}


def test_legend_names_every_kind_with_its_cue():
    legend = render.legend_html()
    for kind in ("accepted", "rejected", "resampled", "bonus", "target"):
        assert f"tok-{kind}" in legend
    assert "struck" in legend and "wavy" in legend and "double" in legend


def test_css_gives_each_kind_a_non_colour_cue():
    from specviz.ui.app import css
    style = css()
    assert "line-through" in style and "wavy" in style and "double" in style
    assert ".tok-accepted" in style and "underline" in style


def test_status_is_escaped_and_errors_alert():
    out = render.status_html("cannot load '<img src=x onerror=alert(1)>'", "error")
    assert "<img" not in out and 'role="alert"' in out


def test_summary_shows_measurements_baseline_and_theory(steps):
    metrics = summarize(steps, steps[-1].total_emitted, 1.0, 0.1)
    plain = summarize(steps, steps[-1].total_emitted, 2.0, 0.1)
    theory = view.theory(metrics, steps, 4, 2.0)
    difference = view.FirstDifference(3, "<b>", " cat")
    out = render.summary_html(metrics, "ngram", plain, 2.0, False, difference, theory=theory)
    assert "2.00×" in out and "first difference at output token 3" in out and "<b>" not in out
    assert f"{theory.expected_tokens_per_step:.2f}" in out and f"{theory.expected_speedup:.2f}×" in out
    same = render.summary_html(metrics, "ngram", plain, 2.0, True, None)
    assert "yes, token for token" in same


def test_a_noisy_speedup_is_marked_never_stated_as_fact(steps):
    from types import SimpleNamespace

    from specviz.measure.plausibility import noise_note
    from specviz.ui.readouts import headline

    metrics = summarize(steps, steps[-1].total_emitted, 1.0, 0.1)
    theory = view.theory(metrics, steps, 4, 5.3)
    note = noise_note("5.30× is more than τ = 3.00")
    out = render.summary_html(metrics, "ngram", metrics, 5.3, True, None, theory=theory, noise=note)
    assert "speedup (noisy)" in out and "sv-tile sv-noisy" in out and render.NOISY_TILE in out
    assert "5.30× (noisy)" in out and "5.30× is more than τ = 3.00" in out  # the whole note in the tile's title
    plain = render.summary_html(metrics, "ngram", metrics, 2.0, True, None, theory=view.theory(metrics, steps, 4, 2.0))
    assert "noisy" not in plain  # the control

    def run(speedup, doubt):
        result = SimpleNamespace(metrics=SimpleNamespace(mean_accepted_length=3.5))
        return SimpleNamespace(speculative=SimpleNamespace(done=True, result=result), speedup=speedup, doubt=doubt)

    assert headline(run(2.8, None)) == "2.80× the speed of plain decoding · τ = 3.50 tokens per step"
    noisy = headline(run(5.3, "5.30× is more than τ = 3.50"))
    assert noisy.startswith("5.30× the speed of plain decoding (noisy)") and "\nThe machine was busy" in noisy
    assert headline(run(None, None)) == "τ = 3.50 tokens per step"  # no baseline: tau alone


def test_theory_uses_measured_alpha_and_c(steps):
    metrics = summarize(steps, 9, 1.0, 0.0)
    theory = view.theory(metrics, steps, 4, 1.5)
    alpha = 6 / 12
    assert theory.alpha == pytest.approx(alpha)
    c = (metrics.draft_seconds / 12) / (metrics.verify_seconds / 3)
    assert theory.cost_ratio == pytest.approx(c)
    assert theory.gamma == 4 and theory.gamma_fixed
    assert theory.expected_tokens_per_step == pytest.approx(expected_tokens_per_step(alpha, 4))
    assert theory.expected_speedup == pytest.approx(expected_speedup(alpha, 4, c))
    assert theory.measured_tokens_per_step == pytest.approx(3.0)
    assert view.theory(summarize([], 0, 1.0, 0.0), [], 4, None) is None


def test_used_gamma_varies_for_adaptive_runs(steps):
    short_last = steps + [make_step(3, [("a", True)], "b", TokenKind.BONUS, 11)]
    assert view.used_gamma(short_last, 4) == (4.0, True)  # only the last step may draft less
    varied = [steps[0], make_step(1, [("a", True), ("b", True)], "c", TokenKind.BONUS, 3), steps[2]]
    gamma, fixed = view.used_gamma(varied, 4)
    assert not fixed and gamma == pytest.approx(10 / 3)


def test_histogram_and_race_points(steps):
    assert view.accepted_length_counts(steps) == ([0, 1, 2, 3, 4], [1, 0, 1, 0, 1])
    seconds, tokens = view.race_points(steps, [0.5, 0.7, 0.9])
    assert seconds == [0.0, 0.5, 0.7, 0.9] and tokens == [0, 3, 8, 9]


def valid(fig):
    """The figure dict as plotly reads it: graph_objects validates every property and raises on a wrong one."""
    import plotly.graph_objects as go

    go.Figure(fig)
    return fig


def test_step_figure_panels(steps):
    fig = valid(charts.step_figure(steps, current_step=1))
    by_name = {trace["name"]: trace for trace in fig["data"]}
    assert by_name["accepted"]["y"] == [2, 4, 0]
    assert by_name["drafted, not accepted"]["y"] == [2, 0, 4]
    assert by_name["share of steps"]["y"] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert by_name["steps"]["y"] == [1, 0, 1, 0, 1]
    assert by_name["draft"]["y"] == [2.0, 2.0, 2.0] and by_name["verify"]["y"] == [10.0, 10.0, 10.0]
    assert by_name["draft"]["xaxis"] == by_name["verify"]["xaxis"] == "x4"
    assert fig["layout"]["barmode"] == "stack"  # draft and verify stacked; accepted + not accepted = drafted
    shaded = [shape for shape in fig["layout"]["shapes"] if shape["x0"] == 0.5 and shape["x1"] == 1.5]
    assert [shape["xref"] for shape in shaded] == ["x", "x4"]  # the current step in both per-step panels


def test_a_phones_step_figure_stacks_its_panels(steps):
    wide, narrow = valid(charts.step_figure(steps, 1)), valid(charts.step_figure(steps, 1, narrow=True))
    assert [t["y"] for t in narrow["data"]] == [t["y"] for t in wide["data"]]  # the same panels, laid out anew
    axes = ["", "2", "3", "4"]
    assert all(narrow["layout"][f"xaxis{k}"]["domain"] == [0.0, 1.0] for k in axes)  # each the full width
    assert wide["layout"]["xaxis2"]["domain"][0] > 0.5  # the control: side by side on a wide screen
    tops = [narrow["layout"][f"yaxis{k}"]["domain"] for k in axes]
    assert all(upper[0] > lower[1] for upper, lower in zip(tops, tops[1:]))  # one under another, no overlap
    assert narrow["layout"]["height"] > wide["layout"]["height"]


def test_empty_figures_say_why():
    assert "Charts appear" in valid(charts.step_figure([]))["layout"]["annotations"][0]["text"]
    assert valid(charts.theory_figure(None))["layout"]["annotations"]


def test_race_figure_has_both_runs_and_the_current_step(steps):
    fig = valid(charts.race_figure(view.race_points(steps, [0.5, 0.7, 0.9]), ([0, 1, 2], [0, 1, 2]), "ngram", (0.7, 8)))
    assert [t["name"] for t in fig["data"]] == ["ngram", "plain decoding", "current step"]
    assert fig["data"][2]["y"] == [8]


def test_theory_figure_marks_the_gamma_used(steps):
    theory = view.theory(summarize(steps, 9, 1.0, 0.0), steps, 4, 1.7)
    curve, used, measured = valid(charts.theory_figure(theory))["data"]
    assert curve["x"] == list(range(1, 17))
    assert curve["y"][3] == pytest.approx(theory.expected_speedup)
    assert used["x"] == [4] and used["y"][0] == pytest.approx(theory.expected_speedup)
    assert measured["y"][0] == pytest.approx(1.7)


def test_inspector_shows_reached_positions_and_the_draw(steps):
    text = {10: " The", 11: " cat", 12: "<img src=x onerror=alert(1)>", 50: " is"}.get
    fig = valid(charts.inspector_figure(steps[0], lambda i: text(i) or f"#{i}", sampling=True))
    annotations = fig["layout"]["annotations"]
    titles = [a["text"] for a in annotations if a["text"].startswith(("position", "resampled"))]
    assert len(titles) == 4  # 3 reached positions (2 accepted, the first rejected) + the residual draw
    assert "rejected" in titles[2] and "residual" in titles[3]
    p_bars = [t for t in fig["data"] if t["name"] == "p (target)"]
    assert [t["yaxis"] for t in p_bars] == ["y", "y2", "y3"] and all(len(t["x"]) == len(t["y"]) for t in p_bars)
    labels = [label for t in fig["data"] for label in t["x"]]
    assert "␣The" in labels and not any("<img" in label for label in labels)
    arrows = [(a["text"], a["xref"]) for a in annotations if a["text"] in ("drafted", "drawn")]
    assert arrows == [("drafted", "x"), ("drafted", "x2"), ("drafted", "x3"), ("drawn", "x4")]
    residual = [t for t in fig["data"] if t["name"] == "residual (drawn from)"][0]
    assert residual["y"][residual["x"].index("␣is")] == pytest.approx(0.6)
    bonus = valid(charts.inspector_figure(steps[1], lambda i: f"#{i}", sampling=True))
    assert any("bonus" in a["text"] for a in bonus["layout"]["annotations"])


def test_the_inspector_plots_tokens_as_categories_even_when_they_are_digits(steps):
    digits = {10: "8", 11: "0", 12: "7", 13: "5", 50: "1", 99: "2", 98: "3", 7: "4"}.get
    fig = valid(charts.inspector_figure(steps[0], lambda i: digits(i) or f"#{i}", sampling=True))
    axes = [key for key in fig["layout"] if key.startswith("xaxis")]
    assert len(axes) == 4 and all(fig["layout"][key]["type"] == "category" for key in axes)


def test_a_step_where_the_output_ended_draws_nothing_after_it():
    """The default example's last step: the drafted end of text accepted, the output ends there; the record's
    next token is no draw (it was never emitted), so no panel and no title may say one was drawn."""
    end, names = 2, {2: "<|im_end|>", 198: "\n", 99: "x"}
    step = make_step(9, [("", True), ("\n", False)], "", TokenKind.RESAMPLED, 34)
    step.positions[0] = position(end, "", p=0.99, q=None, accepted=True)
    step.positions[1].reached = False
    step.next_token.id, step.emitted, step.n_accepted = end, 1, 1
    step.next_top = TopTokens([198, end], [0.998, 0.00002])
    fig = valid(charts.inspector_figure(step, lambda i: names.get(i, f"#{i}"), sampling=False))
    texts = [a["text"] for a in fig["layout"]["annotations"]] + [fig["layout"]["title"]["text"]]
    assert not any("drawn from" in t for t in texts) and not any(a == "drawn" for a in texts)
    assert any("position 1: &lt;|im_end|&gt; accepted" in t for t in texts)  # named, not ∅
    assert "the output ends at &lt;|im_end|&gt;" in fig["layout"]["title"]["text"]
    assert not any("∅" in t for t in texts)
    # the control: the same step not cut draws its resampled token
    step.emitted = 2
    drawn = valid(charts.inspector_figure(step, lambda i: names.get(i, f"#{i}"), sampling=False))
    assert any("drawn from" in a["text"] for a in drawn["layout"]["annotations"])


def test_a_phones_inspector_breaks_its_titles(steps):
    wide = valid(charts.inspector_figure(steps[0], lambda i: f"#{i}", sampling=True))
    narrow = valid(charts.inspector_figure(steps[0], lambda i: f"#{i}", sampling=True, narrow=True))
    titles = lambda fig: [a["text"] for a in fig["layout"]["annotations"] if a["text"].startswith("position")]  # noqa: E731
    assert all("<br>" in t for t in titles(narrow)) and not any("<br>" in t for t in titles(wide))
    assert narrow["layout"]["height"] > wide["layout"]["height"]


def test_compare_ticks_at_first_the_drafters_that_accept_and_pay():
    """Early exit accepts about nothing on the default model (alpha 0.01 on the 2-core CPU): not ticked at first."""
    from specviz.measure.measured import load_measured
    from specviz.proposers import METHODS
    from specviz.ui.tabs import default_methods

    runs = load_measured()
    choices = [m for m in METHODS if m != "plain"]
    ticked = default_methods(runs, choices)
    assert "early-exit" not in ticked and 1 <= len(ticked) <= 3
    cpu = {m["method"].split(":")[0]: m for m in runs[0]["methods"]}
    assert all(cpu[m]["alpha"] >= 0.2 and cpu[m]["speedup"] > 1 for m in ticked if m in cpu)
    assert view.paying_methods({"methods": [{"method": "early-exit:4", "alpha": 0.01, "speedup": 0.4}]}, choices) == []


def test_chart_labels_show_the_characters_plotly_would_otherwise_read_as_markup():
    import html
    for text in ['"', "'", "<b>x</b>", "$x$", "a & b", "<img src=x onerror=alert(1)>"]:
        label = charts.escape_label(text)
        assert not any(c in label for c in '<>"$\'') and "&quot;" not in label and "&#x27;" not in label
        assert html.unescape(label) == text
    assert charts.token_label(' "') == "␣&#34;"


def test_compare_and_cost_figures():
    rows = [{"method": "plain", "tokens_per_second": 10.0, "tau": 1.0},
            {"method": "ngram", "tokens_per_second": 15.0, "tau": 2.2}]
    fig = valid(charts.compare_figure(rows))
    assert fig["data"][0]["y"] == [10.0, 15.0] and fig["data"][1]["y"] == [1.0, 2.2]
    points = [CostPoint("positions", k, 10.0 + k, 128) for k in (1, 2, 4)] + [CostPoint("batch", b, 10.0 * b, 64)
                                                                              for b in (1, 2)]
    cost = valid(charts.cost_figure(points, "cpu"))
    per_forward = [t for t in cost["data"] if t["name"].startswith("ms per forward")]
    assert [t["x"] for t in per_forward] == [[1, 2, 4], [1, 2]]
    per_position = [t for t in cost["data"] if t["name"] == "ms per position (K)"][0]
    assert per_position["y"] == pytest.approx([11.0, 6.0, 3.5])
    assert cost["layout"]["xaxis2"]["type"] == "log"


def legend_colours(fig):
    """(name, colour) of every trace that shows in the legend."""
    return {(t["name"], t["marker"]["color"] if "marker" in t else t["line"]["color"])
            for t in fig["data"] if t.get("showlegend", True)}


def test_legend_entries_never_share_a_colour(steps):
    text = lambda i: f"#{i}"  # noqa: E731
    for fig in (charts.step_figure(steps), charts.inspector_figure(steps[0], text, sampling=False),
                charts.inspector_figure(steps[1], text, sampling=True)):
        entries = legend_colours(fig)
        colours = [colour for _, colour in entries]
        assert len(set(colours)) == len(colours), entries


def test_inspector_of_a_one_hot_drafter_does_not_promise_q(steps):
    one_hot = steps[0].__class__(**{**steps[0].__dict__,
                                    "positions": [p.__class__(**{**p.__dict__, "q_top": None, "q": None})
                                                  for p in steps[0].positions]})
    title = charts.inspector_figure(one_hot, lambda i: f"#{i}", sampling=False)["layout"]["title"]["text"]
    assert "against q" not in title and "one-hot" in title
    assert "p against q" in charts.inspector_figure(steps[0], lambda i: f"#{i}",
                                                    sampling=True)["layout"]["title"]["text"]


def test_loading_message_speaks_of_the_hub_only_for_what_it_downloads(tmp_path):
    from specviz.ui import readouts

    assert "Hub" not in readouts.loading_message(["default", None], 1.0, False)
    assert "Hub" not in readouts.loading_message([str(tmp_path)], 1.0, False)
    hub = readouts.loading_message(["default", "Qwen/Qwen2.5-0.5B-Instruct"], 3.0, False)
    assert "Qwen/Qwen2.5-0.5B-Instruct: a first load downloads it from the Hub" in hub and "default and Qwen" in hub


def test_api_help_names_the_address_the_page_came_from():
    from types import SimpleNamespace

    from specviz.ui import endpoint

    request = SimpleNamespace(headers={"host": "example.org:9000"})
    text = endpoint.api_help(endpoint.page_url(request))
    assert 'Client("http://example.org:9000/")' in text and "7860" not in text
    proxied = SimpleNamespace(headers={"host": "10.0.0.1", "x-forwarded-host": "me-specviz.hf.space",
                                       "x-forwarded-proto": "https"})
    assert endpoint.page_url(proxied) == "https://me-specviz.hf.space/"


def test_the_story_of_a_step_in_plain_words(steps):
    from specviz.ui.readouts import quoted, step_story

    assert step_story(steps[0], sampling=True) == ("Step 0: the drafter proposed 4 tokens; the target agreed with the "
                                                   "first 2; it rejected ‘sat’ and drew ‘is’ from the residual.")
    assert "put its own choice ‘is’ in its place" in step_story(steps[0], sampling=False)
    assert step_story(steps[1], sampling=False).endswith("agreed with all of them and added ‘.’ (the bonus token).")
    assert "agreed with none" in step_story(steps[2], sampling=False)
    ended = steps[0].__class__(**{**steps[0].__dict__, "emitted": 2})  # cut at the end of text after 2 drafts
    assert step_story(ended, sampling=False).endswith("agreed with the first 2, and the output ends there.")
    assert "stopped" not in step_story(steps[0], sampling=False)  # control: a chain the drafter did not cut
    doubted = steps[1].__class__(**{**steps[1].__dict__, "doubted": True})
    last = doubted.positions[-1]
    assert step_story(doubted, sampling=False).startswith(
        f"Step 1: the drafter proposed {doubted.gamma} tokens and stopped there: it gave {quoted(last.text)} only "
        f"{last.q:.0%}, under the draft stop; the target agreed")


def test_a_block_drafters_step_says_its_drafts_came_from_one_forward(steps):
    from specviz import methods
    from specviz.ui.readouts import step_story

    assert methods.method("dflash").drafts_at_once and methods.method("medusa").drafts_at_once
    assert not methods.method("eagle").drafts_at_once and not methods.method("draft").drafts_at_once
    story = step_story(steps[0], sampling=False, at_once=True)
    assert story.startswith("Step 0: the drafter proposed 4 tokens, all at once from one drafting forward (2.0 ms); "
                            "the target agreed with the first 2")
    assert "one drafting forward" not in step_story(steps[0], sampling=False)  # control: a chain drafted token by token
    one = steps[0].__class__(**{**steps[0].__dict__, "gamma": 1})
    assert "at once" not in step_story(one, sampling=False, at_once=True)  # one draft: nothing to say of "at once"
    from types import SimpleNamespace

    from specviz.ui.readouts import drafts_at_once
    assert drafts_at_once(SimpleNamespace(request=SimpleNamespace(method="dflash")))
    assert not drafts_at_once(SimpleNamespace(request=SimpleNamespace(method="no-such-method")))  # read back: no word
    names = lambda fig: [t["name"] for t in fig["data"]]  # noqa: E731
    assert "draft (one forward)" in names(charts.step_figure(steps, at_once=True))
    assert "draft (one forward)" not in names(charts.step_figure(steps))  # control


def test_whitespace_shows_as_marks():
    def shown(text, kind=TokenKind.ACCEPTED):
        return render.shown_text(TokenRecord(id=1, text=text, kind=kind, step=0))

    assert shown("\n") == "⏎\n" and shown("    ") == "····" and shown(" cat") == " cat"
    assert shown("\n", TokenKind.REJECTED) == "⏎"  # not in the output: no line break
    spans = parse(render.token_view_html([TokenRecord(id=1, text="  ", kind=TokenKind.ACCEPTED, step=0)])).spans
    assert "tok-ws" in spans[0][0] and spans[0][1]["tabindex"] == "0"


def test_the_answer_reads_as_text_and_the_other_modes_show_the_marks():
    tokens = [TokenRecord(id=1, text="Hi", kind=TokenKind.ACCEPTED, step=0),
              TokenRecord(id=2, text="  ", kind=TokenKind.ACCEPTED, step=0),
              TokenRecord(id=3, text=".\n", kind=TokenKind.BONUS, step=0),
              TokenRecord(id=4, text="<|im_end|>", kind=TokenKind.RESAMPLED, step=1)]
    html_text = render.token_view_html(tokens, special={4})
    spans = parse(html_text).spans
    assert [text for _, _, text in spans] == ["Hi", "··  ", ".⏎\n", f"<|im_end|>{render.END_MARK}"]
    assert html_text.count('class="sv-mark"') == 3 and html_text.count('class="sv-plain') == 2
    assert '<span class="sv-mark">⏎</span>\n' in html_text and "&lt;|im_end|&gt;" in html_text
    # without the special id, a model's literal text is shown as written, in every mode
    assert render.END_MARK not in render.token_view_html(tokens[3:])
    css = (Path(__file__).resolve().parents[1] / "assets" / "specviz.css").read_text()
    assert 'body[data-sv-mode="answer"] #sv-tokens .sv-mark { display: none; }' in css


def test_each_step_is_one_group(steps):
    html_text = render.token_view_html(tokens_of(steps))
    assert html_text.count('<span class="sv-step" data-step=') == len(steps)


def test_the_batch_chart_marks_where_speculation_stops_paying():
    from specviz.ui.batch_tab import verdict_line

    def entry(method, size, speedup):
        return {"method": method, "batch_size": size, "speedup": speedup, "tokens_per_second": 10.0 * size}

    summary = [entry("plain", 1, 1.0), entry("plain", 8, 1.0), entry("ngram", 1, 1.6), entry("ngram", 8, 0.9)]
    figure = charts.batch_figure(summary, "cpu", "ngram")
    stops = [a for a in figure["layout"]["annotations"] if "stops" in a["text"]]
    assert [a["text"] for a in stops] == ["stops paying at batch 8"]
    assert stops[0]["x"] == pytest.approx(math.log10(8))  # the axis is log: plotly reads log10 of the position
    assert "stops paying at batch 8" in verdict_line(summary, "ngram")
    paying = summary[:3] + [entry("ngram", 8, 1.2)]
    assert not [a for a in charts.batch_figure(paying, "cpu", "ngram")["layout"]["annotations"] if "stops" in a["text"]]
    assert "still pays at batch 8" in verdict_line(paying, "ngram")


def test_the_waits_a_run_excludes_are_named_as_what_happened():
    first = readouts.waits_note(raced=True, paused=False, drawn_here=True)
    assert "turns in the race" in first and "pauses" not in first
    assert "pauses" in readouts.waits_note(raced=True, paused=True, drawn_here=True)
    alone = readouts.waits_note(raced=False, paused=False, drawn_here=False)
    assert "turns" not in alone and "pauses" not in alone
    html = render.summary_html(view.running_metrics([], 1.0), "ngram", idle_seconds=2.0, idle_why=first)
    assert "turns in the race" in html and "pauses and other users" not in html


def test_preparing_a_run_speaks_of_cuda_graphs_only_on_a_gpu():
    cpu = readouts.loading_message(["default", None], 2.0, True, "cpu")
    gpu = readouts.loading_message(["default", None], 2.0, True, "cuda")
    assert "CUDA" not in cpu and "GPU" not in cpu and "CUDA graphs" in gpu


def test_counts_agree_with_their_noun():
    assert readouts.plural(1, "token") == "1 token" and readouts.plural(2, "token") == "2 tokens"
    assert readouts.plural(0, "step") == "0 steps"
