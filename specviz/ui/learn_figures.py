"""The Learn tab's records as widget values: small pure functions (*_figure and *_html; *_rows and *_sentence are
the lessons' own, shared with the command line), so that tests can check them without a browser, and the text
of a record made safe to show in a Markdown widget."""
from __future__ import annotations

import dataclasses
import html
import re
from collections import Counter
from collections.abc import Callable

from .. import lessons
from ..lessons import distribution_sentence, side_by_side_sentence
from ..lessons.common import megabytes as _mb
from ..api import expected_speedup
from . import charts, render

COLOURS = {"plain": charts.COLOURS["plain"], "speculative": charts.COLOURS["accepted"],
           "wrong": charts.COLOURS["rejected"], "exact": charts.COLOURS["bonus"]}
HISTOGRAM_BARS = 12  # the most frequent tested tokens shown; the rest are summed in "other"


# text from a record, in a Markdown widget ----------------------------------------------------------------------

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>&~:])")


def markdown_text(text: str) -> str:
    """Text shown as itself in Markdown: every character Markdown or HTML would read as markup is escaped, so
    that a link, an image (which the browser would fetch) or a tag in a model's output or in a saved file is
    shown as the characters it is."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def markdown_safe(value):
    """A record with every string in it (at any depth) made markdown_text; numbers and structure unchanged."""
    if isinstance(value, str):
        return markdown_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        copy = dataclasses.replace(value) if all(f.init for f in dataclasses.fields(value)) else value
        for f in dataclasses.fields(value):
            object.__setattr__(copy, f.name, markdown_safe(getattr(value, f.name)))
        return copy
    if isinstance(value, dict):
        return type(value)({k: markdown_safe(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(markdown_safe(v) for v in value)
    return value


def sentence_text(sentence: Callable, record, *args) -> str:
    """A lesson's sentence (Markdown: its own emphasis stays) of a record whose strings, a model's tokens or a
    saved file's fields, are shown as text."""
    return sentence(markdown_safe(record), *args)


# mechanic -------------------------------------------------------------------------------------------------------

def mechanic_html(record: lessons.Mechanic) -> str:
    """The token view in its steps layout (one lane per target forward), whatever the Run tab's reading mode."""
    return f'<div class="sv-lesson-steps">{render.token_view_html(record.tokens, record.prompt)}</div>'


# exact ----------------------------------------------------------------------------------------------------------

def side_by_side_html(record: lessons.SideBySide) -> str:
    def column(title, tokens):
        spans = "".join(f'<span class="tok tok-target">{html.escape(t)}</span>' for t in tokens)
        return f'<div class="sv-lesson-col"><b>{title}</b><div class="sv-output">{spans}</div></div>'

    return (f'<div class="sv-lesson-pair">{column(f"with {html.escape(record.method)}", record.speculative)}'
            f'{column("plain decoding", record.plain)}</div>')


def distribution_figure(record: lessons.Distribution | None) -> dict:
    if record is None or not record.plain.runs:
        return charts.empty_figure("Press Run lesson: the histograms fill as the runs come in.", 380)
    arms = [("plain", record.plain), ("speculative", record.speculative)]
    if record.wrong is not None:
        arms.append(("wrong", record.wrong))
    total = sum((h.counts for _, h in arms), start=Counter())
    shown = [t for t, _ in total.most_common(HISTOGRAM_BARS)]
    labels = charts._unique_labels(shown, lambda t: record.token_texts.get(t, str(t)))
    data = []
    for key, h in arms:
        if not h.runs:
            continue
        share = [h.counts.get(t, 0) / h.runs for t in shown]
        other = 1 - sum(share)
        method = charts.escape_label(record.method)
        name = {"plain": "plain decoding", "speculative": f"with {method}", "wrong": f"{method}, wrong verifier"}[key]
        data.append({"type": "bar", "x": labels + ["other"], "y": share + [other], "name": f"{name} ({h.runs} runs)",
                     "marker": {"color": COLOURS[key]}})
    data.append({"type": "scatter", "mode": "markers", "x": labels, "y": [record.exact.get(t, 0.0) for t in shown],
                 "name": "target's exact probability",
                 "marker": {"color": COLOURS["exact"], "symbol": "diamond", "size": 9}})
    fig = charts._figure(data, f"The second new token, {record.runs} seeds each, temperature {record.temperature}", 400)
    fig["layout"]["barmode"] = "group"
    charts._axes(fig, 1, None, {"title": {"text": "share of runs"}, "rangemode": "tozero"})
    return fig


# cost -----------------------------------------------------------------------------------------------------------

def verify_cost_figure(record: lessons.VerifyCost | None) -> dict:
    if record is None or not record.points:
        return charts.empty_figure("Press Run lesson to time the target's forward on this machine.", 360)
    xs = [p.x for p in record.points]
    data = [{"type": "scatter", "mode": "lines+markers", "x": xs, "y": [p.ms for p in record.points],
             "name": "measured forward (ms)", "line": {"color": COLOURS["speculative"]}},
            {"type": "scatter", "mode": "lines", "x": xs, "y": [record.floor_ms] * len(xs),
             "name": f"weight-read floor: {_mb(record.weight_bytes)} at {record.bandwidth_gbs:g} GB/s "
                     f"({charts.escape_label(record.bandwidth_source)})",
             "line": {"color": COLOURS["wrong"], "dash": "dash"}}]
    fig = charts._figure(data, f"One forward of K new positions on {charts.escape_label(record.device)}", 380)
    charts._axes(fig, 1, {"title": {"text": "K: positions checked in one forward (γ + 1)"}, "dtick": 1},
                 {"title": {"text": "ms"}, "rangemode": "tozero"})
    return fig


# acceptance -----------------------------------------------------------------------------------------------------

ACCEPTANCE_HEADERS = lessons.speedup.HEADERS
ACCEPTANCE_WIDTHS = ["9%", "8%", "8%", "9%", "4%", "4%", "10%", "10%", "38%"]  # the literature column wraps in its own


def what_if_figure(rows: list[lessons.AcceptanceRow], alpha: float, gamma: int, c: float) -> dict:
    """Expected speedup against alpha at the chosen gamma and c, the chosen alpha marked, the measured runs as
    points, one colour a method (their own gamma and c differ: the curve is a guide, not a fit)."""
    alphas = [i / 100 for i in range(0, 100)]
    data = [{"type": "scatter", "mode": "lines", "x": alphas,
             "y": [expected_speedup(a, int(gamma), c) for a in alphas],
             "name": f"expected, γ = {int(gamma)}, c = {c:g}", "line": {"color": COLOURS["exact"]}},
            {"type": "scatter", "mode": "markers", "x": [alpha], "y": [expected_speedup(alpha, int(gamma), c)],
             "name": f"α = {alpha:.2f}", "marker": {"color": COLOURS["exact"], "size": 12, "symbol": "diamond"}}]
    measured = [r for r in rows if r.alpha is not None]
    palette = [charts.COLOURS[k] for k in ("accepted", "resampled", "verify", "draft", "rejected", "plain")]
    for i, method in enumerate(dict.fromkeys(r.method for r in measured)):  # one trace a method: a legend, no overlap
        mine = [r for r in measured if r.method == method]
        data.append({"type": "scatter", "mode": "markers", "x": [r.alpha for r in mine],
                     "y": [r.measured_speedup for r in mine], "name": f"{charts.escape_label(method)} (measured)",
                     "customdata": [charts.escape_label(r.kind) + (" (noisy)" if r.doubt else "") for r in mine],
                     "hovertemplate": "%{customdata}: α %{x:.2f}, %{y:.2f}×<extra></extra>",
                     "marker": {"color": palette[i % len(palette)], "size": 10,  # hollow: failed its check
                                "symbol": ["circle-open" if r.doubt else "circle" for r in mine]}})
    fig = charts._figure(data, "What if: expected speedup against acceptance α", 400)
    charts._axes(fig, 1, {"title": {"text": "α (share of drafts accepted)"}, "range": [0, 1]},
                 {"title": {"text": "speedup over plain"}, "rangemode": "tozero"})
    fig["layout"]["shapes"].append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                                    "line": {"color": "#999", "dash": "dot", "width": 1}})
    return fig


# bugs -----------------------------------------------------------------------------------------------------------

def bugs_figure(record: lessons.bugs.Bugs | None) -> dict:
    """Each arm's share of its seeds on the most frequent first tokens, beside the target's exact probability."""
    if record is None or not record.seeds:
        return charts.empty_figure("Press Run lesson: every verifier's histogram fills as the seeds come in.", 380)
    shown, shares = lessons.bugs.bug_figure_data(record, HISTOGRAM_BARS)
    labels = charts._unique_labels(shown, lambda t: record.token_texts.get(t, str(t)))
    data = []
    for arm in record.arms:
        slip = lessons.bugs.SLIP_BY_KEY[arm.key]
        colour = COLOURS["speculative"] if arm.key == "correct" else None if slip.wrong else COLOURS["plain"]
        data.append({"type": "bar", "x": labels, "y": shares[arm.key], "name": charts.escape_label(slip.label),
                     **({"marker": {"color": colour}} if colour else {})})
    data.append({"type": "scatter", "mode": "markers", "x": labels, "y": [record.exact.get(t, 0.0) for t in shown],
                 "name": "target's exact probability",
                 "marker": {"color": COLOURS["exact"], "symbol": "diamond", "size": 9}})
    fig = charts._figure(data, f"The first new token, {record.seeds} seeds, temperature {record.temperature}", 420)
    fig["layout"]["barmode"] = "group"
    charts._axes(fig, 1, None, {"title": {"text": "share of seeds"}, "rangemode": "tozero"})
    return fig


def unchanged_widgets(record: lessons.exactness.Unchanged) -> tuple[str, str, dict, str]:
    """The exactness lesson's whole record as its four widgets: the greedy pair and sentence, the histograms and
    their sentence."""
    return (side_by_side_html(record.greedy), sentence_text(side_by_side_sentence, record.greedy),
            distribution_figure(record.sampled), sentence_text(distribution_sentence, record.sampled))
