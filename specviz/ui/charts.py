"""Plotly figures from step records and measurements: pure functions (figure in, nothing else touched).

Token texts in labels go through render.escape_text: plotly reads a few HTML tags and `$...$` (LaTeX) in
strings, and a token must show as the characters it is."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..cost_curve import CostPoint
from ..records import StepRecord, TopTokens
from ..metrics import per_position_acceptance
from .render import escape_text
from .view import Theory, accepted_length_counts, speedup_curve

COLOURS = {"accepted": "#004488", "rejected": "#BB5566", "resampled": "#DDAA33", "bonus": "#228833",
           "plain": "#555555", "draft": "#66CCEE", "verify": "#004488", "p": "#004488", "q": "#BBBBBB",
           "residual": "#DDAA33", "current": "rgba(221, 170, 51, 0.25)"}
FONT = dict(family="system-ui, sans-serif", size=12)
INSPECTOR_TOP = 8  # tokens per distribution shown in the inspector


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    """Title top left, legend in its own strip under the plot (70 px below the plot area: clear of axis titles)."""
    plot_height = height - 60 - 100
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=14)), height=height, font=FONT,
                      margin=dict(l=55, r=20, t=60, b=100), template="plotly_white", hovermode="closest",
                      legend=dict(orientation="h", x=0, y=-70 / plot_height, yanchor="top"))
    return fig


def empty_figure(message: str, height: int = 260) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=escape_text(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#666"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, "", height)


def _mark_step(fig: go.Figure, step: int, row: int, col: int) -> None:
    fig.add_vrect(x0=step - 0.5, x1=step + 0.5, fillcolor=COLOURS["current"], line_width=0, row=row, col=col)


def step_figure(steps: list[StepRecord], current_step: int | None = None, title: str = "Steps") -> go.Figure:
    """Four panels: accepted against drafted per step, per-position acceptance, the accepted-length histogram,
    and draft against verify latency per step (stacked). current_step is shaded in the per-step panels."""
    if not steps:
        return empty_figure("Charts appear as the run produces steps.", 520)
    fig = make_subplots(rows=2, cols=2, vertical_spacing=0.16, horizontal_spacing=0.09, subplot_titles=(
        "accepted vs drafted per step", "per-position acceptance", "accepted length (drafting steps)",
        "latency per step (ms)"))
    index = [s.index for s in steps]
    accepted = [s.n_accepted for s in steps]
    fig.add_trace(go.Bar(x=index, y=accepted, name="accepted", marker_color=COLOURS["accepted"],
                         legendgroup="a"), 1, 1)
    fig.add_trace(go.Bar(x=index, y=[s.gamma - s.n_accepted for s in steps], name="drafted, not accepted",
                         marker_color=COLOURS["rejected"], marker_pattern_shape="/", legendgroup="a"), 1, 1)
    shares = per_position_acceptance(steps)
    fig.add_trace(go.Bar(x=list(range(1, len(shares) + 1)), y=shares, name="share of steps", showlegend=False,
                         marker_color=COLOURS["accepted"]), 1, 2)
    lengths, counts = accepted_length_counts(steps)
    fig.add_trace(go.Bar(x=lengths, y=counts, name="steps", showlegend=False, marker_color=COLOURS["bonus"]), 2, 1)
    fig.add_trace(go.Bar(x=index, y=[s.draft_ms for s in steps], name="draft", marker_color=COLOURS["draft"],
                         marker_pattern_shape="x"), 2, 2)
    fig.add_trace(go.Bar(x=index, y=[s.verify_ms for s in steps], name="verify", marker_color=COLOURS["verify"]), 2, 2)
    fig.update_layout(barmode="stack", bargap=0.15)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_xaxes(title_text="draft position i", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="first i accepted", range=[0, 1.05], row=1, col=2)
    fig.update_xaxes(title_text="accepted drafts", dtick=1, row=2, col=1)
    fig.update_yaxes(title_text="steps", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=2)
    fig.update_yaxes(title_text="ms", row=2, col=2)
    if current_step is not None:
        _mark_step(fig, current_step, 1, 1)
        _mark_step(fig, current_step, 2, 2)
    return _layout(fig, escape_text(title), 560)


def race_figure(speculative: tuple[Sequence[float], Sequence[int]], plain: tuple[Sequence[float], Sequence[int]] | None,
                method: str, current: tuple[float, int] | None = None) -> go.Figure:
    """Tokens against engine time for the speculative run and plain decoding of the same prompt."""
    fig = go.Figure()
    seconds, tokens = speculative
    fig.add_trace(go.Scatter(x=list(seconds), y=list(tokens), mode="lines+markers", name=escape_text(method),
                             line=dict(color=COLOURS["accepted"], width=3), marker=dict(size=4)))
    if plain is not None and len(plain[0]) > 1:
        fig.add_trace(go.Scatter(x=list(plain[0]), y=list(plain[1]), mode="lines", name="plain decoding",
                                 line=dict(color=COLOURS["plain"], width=2, dash="dash")))
    if current is not None:
        fig.add_trace(go.Scatter(x=[current[0]], y=[current[1]], mode="markers", name="current step",
                                 marker=dict(size=14, color=COLOURS["resampled"], symbol="diamond",
                                             line=dict(color="#000", width=1))))
    fig.update_xaxes(title_text="seconds (engine time)", rangemode="tozero")
    fig.update_yaxes(title_text="tokens", rangemode="tozero")
    return _layout(fig, "The race: tokens against time", 340)


def theory_figure(theory: Theory | None) -> go.Figure:
    """Expected speedup against gamma from the measured alpha and c, with the gamma used (and what was
    measured there) marked."""
    if theory is None:
        return empty_figure("Theory needs a run that drafted tokens.", 340)
    gammas, speedups = speedup_curve(theory.alpha, theory.cost_ratio)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=gammas, y=speedups, mode="lines+markers", name="expected speedup",
                             line=dict(color=COLOURS["accepted"])))
    label = f"γ used ({theory.gamma:g})" if theory.gamma_fixed else f"mean γ used ({theory.gamma:.2f})"
    fig.add_trace(go.Scatter(x=[theory.gamma], y=[theory.expected_speedup], mode="markers", name=label,
                             marker=dict(size=14, color=COLOURS["resampled"], symbol="diamond",
                                         line=dict(color="#000", width=1))))
    if theory.measured_speedup is not None:
        fig.add_trace(go.Scatter(x=[theory.gamma], y=[theory.measured_speedup], mode="markers", name="measured",
                                 marker=dict(size=12, color=COLOURS["rejected"], symbol="x")))
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"))
    fig.update_xaxes(title_text="γ (draft tokens per step)", dtick=1)
    fig.update_yaxes(title_text="speedup over plain", rangemode="tozero")
    return _layout(fig, f"Expected speedup vs γ  (α = {theory.alpha:.2f}, c = {theory.cost_ratio:.3f})", 340)


def token_label(text: str) -> str:
    """A token as a chart label: spaces and newlines made visible, markup escaped."""
    return escape_text(text.replace(" ", "␣").replace("\n", "⏎") or "∅")


def _union_top(tops: list[TopTokens | None], n: int) -> list[int]:
    ids: list[int] = []
    for top in tops:
        if top is not None:
            ids.extend(i for i in top.ids[:n] if i not in ids)
    return ids


def _prob_of(top: TopTokens | None, token_id: int) -> float | None:
    if top is None:
        return None
    try:
        return top.probs[top.ids.index(token_id)]
    except ValueError:
        return 0.0  # outside the top-20 kept: below every kept probability


def inspector_figure(step: StepRecord | None, token_text: Callable[[int], str], sampling: bool) -> go.Figure:
    """For each drafted position the verifier reached: the top tokens' p against q, the drafted token marked;
    then the distribution the step's last token was drawn from: the residual norm(max(0, p - q)) after a
    rejection, p itself after all drafts were accepted (the bonus), and that token marked."""
    if step is None:
        return empty_figure("Choose a step to inspect.", 300)
    reached = [pos for pos in step.positions if pos.reached]
    panels = len(reached) + 1
    titles = []
    for i, pos in enumerate(reached):
        verdict = "accepted" if pos.accepted else "rejected"
        q = "one-hot" if pos.q is None else f"{pos.q:.3f}"
        u = "" if pos.u is None else f", u = {pos.u:.3f}"
        titles.append(f"position {i + 1}: {token_label(pos.text)} {verdict}: p = {pos.p:.3f}, q = {q}, "
                      f"min(1, p/q) = {pos.accept_prob:.3f}{u}")
    kind = step.next_token.kind.value
    source = {"resampled": "residual max(0, p - q), renormalised" if sampling else "p (greedy: its argmax)",
              "bonus": "p after every draft was accepted", "target": "p (a plain step)"}.get(kind, "p")
    titles.append(f"{kind} token {token_label(token_text(step.next_token.id))}: drawn from {source}")
    fig = make_subplots(rows=panels, cols=1, subplot_titles=titles, vertical_spacing=min(0.12, 0.5 / panels))
    for row, pos in enumerate(reached, start=1):
        ids = _union_top([pos.p_top, pos.q_top], INSPECTOR_TOP)
        if pos.token_id not in ids:
            ids.append(pos.token_id)
        labels = _unique_labels(ids, token_text)
        fig.add_trace(go.Bar(x=labels, y=[_prob_of(pos.p_top, i) for i in ids], name="p (target)",
                             marker_color=COLOURS["p"], showlegend=row == 1, legendgroup="p"), row, 1)
        if pos.q_top is not None:
            fig.add_trace(go.Bar(x=labels, y=[_prob_of(pos.q_top, i) for i in ids], name="q (drafter)",
                                 marker_color=COLOURS["q"], showlegend=row == 1, legendgroup="q"), row, 1)
        drafted = labels[ids.index(pos.token_id)]
        colour = COLOURS["accepted"] if pos.accepted else COLOURS["rejected"]
        _point_at(fig, row, drafted, "drafted", colour)
    row = panels
    ids = list(step.next_top.ids[:INSPECTOR_TOP])
    if step.next_token.id not in ids:
        ids.append(step.next_token.id)
    labels = _unique_labels(ids, token_text)
    name = "residual" if kind == "resampled" and sampling else "p"
    fig.add_trace(go.Bar(x=labels, y=[_prob_of(step.next_top, i) for i in ids], name=f"{name} (drawn from)",
                         marker_color=COLOURS["residual"] if name == "residual" else COLOURS["p"],
                         showlegend=True), row, 1)
    _point_at(fig, row, labels[ids.index(step.next_token.id)], "drawn", COLOURS.get(kind, "#000"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05], title_text="prob")
    fig.update_annotations(font_size=11)
    return _layout(fig, f"Step {step.index}: p against q at each drafted position", 150 + 190 * panels)


def _point_at(fig: go.Figure, row: int, category: str, text: str, colour: str) -> None:
    """An arrow over one bar of the row-th panel."""
    suffix = "" if row == 1 else str(row)
    fig.add_annotation(x=category, y=1.0, xref=f"x{suffix}", yref=f"y{suffix} domain", text=text, showarrow=True,
                       arrowhead=2, arrowcolor=colour, font=dict(color=colour, size=11), ax=0, ay=-18)


def _unique_labels(ids: list[int], token_text: Callable[[int], str]) -> list[str]:
    """Chart categories must be unique: two ids that decode alike get their ids appended."""
    labels = [token_label(token_text(i)) for i in ids]
    return [f"{label} ({i})" if labels.count(label) > 1 else label for label, i in zip(labels, ids)]


def compare_figure(rows: list[dict]) -> go.Figure:
    """Per method: tokens/s (plain included) and tokens per step."""
    if not rows:
        return empty_figure("Results appear here method by method.", 340)
    names = [escape_text(r["method"]) for r in rows]
    colours = [COLOURS["plain"] if r["method"] == "plain" else COLOURS["accepted"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens/s (engine time)", "tokens per step τ"))
    fig.add_trace(go.Bar(x=names, y=[r["tokens_per_second"] for r in rows], marker_color=colours,
                         text=[f"{r['tokens_per_second']:.1f}" for r in rows], textposition="auto",
                         showlegend=False), 1, 1)
    fig.add_trace(go.Bar(x=names, y=[r["tau"] for r in rows], marker_color=colours,
                         text=[f"{r['tau']:.2f}" for r in rows], textposition="auto", showlegend=False), 1, 2)
    return _layout(fig, "Methods on one prompt", 360)


def cost_figure(points: list[CostPoint], device: str) -> go.Figure:
    """Forward time against new positions K (batch 1) and against batch size B (one position each)."""
    if not points:
        return empty_figure("Press Measure to time the target on this machine.", 340)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "one forward, K new positions (batch 1)", "one forward, batch B (1 new position each)"))
    for col, axis, label in ((1, "positions", "K"), (2, "batch", "B")):
        chosen = [p for p in points if p.axis == axis]
        if not chosen:
            continue
        xs = [p.x for p in chosen]
        fig.add_trace(go.Scatter(x=xs, y=[p.ms for p in chosen], mode="lines+markers", name=f"ms per forward ({label})",
                                 line=dict(color=COLOURS["accepted"])), 1, col)
        fig.add_trace(go.Scatter(x=xs, y=[p.ms / p.x for p in chosen], mode="lines+markers",
                                 name=f"ms per position ({label})",
                                 line=dict(color=COLOURS["resampled"], dash="dash")), 1, col)
        fig.update_xaxes(title_text=label, row=1, col=col, type="log" if axis == "batch" else "linear",
                         dtick=None if axis == "batch" else 1)
        fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=col)
    return _layout(fig, f"Target forward time on {escape_text(device)}", 380)
