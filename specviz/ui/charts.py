"""Plotly figures from step records and measurements: pure functions that return plotly's JSON figure
format, {"data": [traces], "layout": {...}}, as plain dicts.

Plain dicts, not plotly.graph_objects: building validated figure objects costs 30-100 ms each, which a
2-core CPU takes from the engine while it streams (the tests validate every figure with plotly instead).
Token texts in labels go through escape_label: plotly reads a few HTML tags and `$...$` (LaTeX) in strings,
and a token must show as the characters it is."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..measure.cost_curve import CostPoint
from ..records.metrics import per_position_acceptance
from ..records.schema import StepRecord, TokenKind, TopTokens
from .view import Theory, accepted_length_counts, speedup_curve

COLOURS = {"accepted": "#004488", "rejected": "#BB5566", "resampled": "#DDAA33", "bonus": "#228833",
           "plain": "#555555", "draft": "#66CCEE", "verify": "#AA3377", "p": "#004488", "q": "#BBBBBB",
           "drawn": "#228833", "residual": "#DDAA33", "current": "rgba(221, 170, 51, 0.25)"}
INSPECTOR_TOP = 8  # tokens per distribution shown in the inspector
_AXIS = {"gridcolor": "#e8e8e8", "zerolinecolor": "#cccccc", "linecolor": "#999999", "automargin": True}


# plotly decodes &amp; &lt; &gt; and numeric references in text, but not &quot; or &#x27;
_LABEL_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;", "$": "&#36;"})


def escape_label(text) -> str:
    """Text for a plotly label or title: markup and LaTeX delimiters shown as characters."""
    return str(text).translate(_LABEL_ESCAPES)


def _axis_id(k: int) -> str:
    return "" if k == 1 else str(k)


def _figure(data: list[dict], title: str, height: int, rows: int = 1, cols: int = 1,
            titles: Sequence[str] = (), hgap: float = 0.09, vgap: float = 0.16) -> dict:
    """A figure with a rows x cols grid of plots (axes x, x2, ... numbered row by row), a title top left and
    the legend in its own strip under the plots."""
    layout = {
        "title": {"text": title, "x": 0.01, "font": {"size": 14}}, "height": height,
        "font": {"family": "system-ui, sans-serif", "size": 12}, "margin": {"l": 55, "r": 20, "t": 60, "b": 100},
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)", "hovermode": "closest", "barmode": "stack",
        "legend": {"orientation": "h", "x": 0, "y": -70 / (height - 160), "yanchor": "top"},
        "annotations": [], "shapes": [],
    }
    width, tall = (1 - hgap * (cols - 1)) / cols, (1 - vgap * (rows - 1)) / rows
    for r in range(rows):
        for c in range(cols):
            k = r * cols + c + 1
            x0, y1 = c * (width + hgap), 1 - r * (tall + vgap)
            x_domain = [max(0.0, round(x0, 6)), min(1.0, round(x0 + width, 6))]  # rounding can stray past [0, 1]
            y_domain = [max(0.0, round(y1 - tall, 6)), min(1.0, round(y1, 6))]
            layout[f"xaxis{_axis_id(k)}"] = {**_AXIS, "domain": x_domain, "anchor": f"y{_axis_id(k)}"}
            layout[f"yaxis{_axis_id(k)}"] = {**_AXIS, "domain": y_domain, "anchor": f"x{_axis_id(k)}"}
            if k <= len(titles):
                layout["annotations"].append({"text": titles[k - 1], "x": x0 + width / 2, "y": y1, "xref": "paper",
                                              "yref": "paper", "xanchor": "center", "yanchor": "bottom",
                                              "showarrow": False, "font": {"size": 12}})
    return {"data": data, "layout": layout}


def _on(trace: dict, k: int) -> dict:
    """Put a trace on the k-th plot of the grid."""
    return {**trace, "xaxis": f"x{_axis_id(k)}", "yaxis": f"y{_axis_id(k)}"}


def _axes(fig: dict, k: int, x: dict | None = None, y: dict | None = None) -> None:
    fig["layout"][f"xaxis{_axis_id(k)}"].update(x or {})
    fig["layout"][f"yaxis{_axis_id(k)}"].update(y or {})


def _bar(x, y, name: str, colour: str, **extra) -> dict:
    return {"type": "bar", "x": list(x), "y": list(y), "name": name, "marker": {"color": colour}, **extra}


def empty_figure(message: str, height: int = 260) -> dict:
    fig = _figure([], "", height)
    fig["layout"]["annotations"].append({"text": escape_label(message), "showarrow": False, "x": 0.5, "y": 0.5,
                                         "xref": "paper", "yref": "paper", "font": {"size": 14, "color": "#666"}})
    _axes(fig, 1, {"visible": False}, {"visible": False})
    return fig


def _mark_step(fig: dict, step: int, k: int) -> None:
    fig["layout"]["shapes"].append({"type": "rect", "xref": f"x{_axis_id(k)}", "yref": f"y{_axis_id(k)} domain",
                                    "x0": step - 0.5, "x1": step + 0.5, "y0": 0, "y1": 1, "layer": "below",
                                    "fillcolor": COLOURS["current"], "line": {"width": 0}})


def step_figure(steps: list[StepRecord], current_step: int | None = None, narrow: bool = False,
                at_once: bool = False) -> dict:
    """Four panels: accepted against drafted per step (stacked: accepted + not accepted = drafted),
    per-position acceptance, the accepted-length histogram, and draft against verify latency per step
    (stacked). current_step is shaded in the per-step panels. narrow (a phone): the panels in one column, each
    the screen's width, instead of a 2x2 grid. at_once: the drafter writes a step's draft in one forward, which
    the draft bar's name says."""
    if not steps:
        return empty_figure("Charts appear as the run produces steps.", 260 if narrow else 520)
    index = [s.index for s in steps]
    shares = per_position_acceptance(steps)
    lengths, counts = accepted_length_counts(steps)
    data = [
        _on(_bar(index, [s.n_accepted for s in steps], "accepted", COLOURS["accepted"]), 1),
        _on(_bar(index, [s.gamma - s.n_accepted for s in steps], "drafted, not accepted", COLOURS["rejected"],
                 marker={"color": COLOURS["rejected"], "pattern": {"shape": "/"}}), 1),
        _on(_bar(range(1, len(shares) + 1), shares, "share of steps", COLOURS["accepted"], showlegend=False), 2),
        _on(_bar(lengths, counts, "steps", COLOURS["bonus"], showlegend=False), 3),
        _on(_bar(index, [s.draft_ms for s in steps], "draft (one forward)" if at_once else "draft", COLOURS["draft"],
                 marker={"color": COLOURS["draft"], "pattern": {"shape": "x"}}), 4),
        _on(_bar(index, [s.verify_ms for s in steps], "verify", COLOURS["verify"]), 4),
    ]
    titles = ("accepted of drafted", "acceptance by position", "accepted length", "latency (ms)")
    if narrow:  # ~140 px a panel; each ~105 px gap holds a panel's tick labels, its axis title, the next one's title
        fig = _figure(data, "Steps", 1040, 4, 1, titles, vgap=0.12)
    else:
        fig = _figure(data, "Steps", 600, 2, 2, titles, hgap=0.16, vgap=0.26)
    fig["layout"]["bargap"] = 0.15
    _axes(fig, 1, {"title": {"text": "step"}}, {"title": {"text": "tokens"}})
    _axes(fig, 2, {"title": {"text": "draft position i"}, "dtick": 1}, {"title": {"text": "share"},
                                                                        "range": [0, 1.05]})
    _axes(fig, 3, {"title": {"text": "accepted drafts"}, "dtick": 1}, {"title": {"text": "steps"}})
    _axes(fig, 4, {"title": {"text": "step"}}, {"title": {"text": "ms"}})
    if current_step is not None:
        _mark_step(fig, current_step, 1)
        _mark_step(fig, current_step, 4)
    return fig


def race_figure(speculative: tuple[Sequence[float], Sequence[int]], plain: tuple[Sequence[float], Sequence[int]] | None,
                method: str, current: tuple[float, int] | None = None) -> dict:
    """Tokens against engine time for the speculative run and plain decoding of the same prompt."""
    seconds, tokens = speculative
    data = [{"type": "scatter", "x": list(seconds), "y": list(tokens), "mode": "lines+markers",
             "name": escape_label(method), "line": {"color": COLOURS["accepted"], "width": 3}, "marker": {"size": 4}}]
    if plain is not None and len(plain[0]) > 1:
        data.append({"type": "scatter", "x": list(plain[0]), "y": list(plain[1]), "mode": "lines",
                     "name": "plain decoding", "line": {"color": COLOURS["plain"], "width": 2, "dash": "dash"}})
    if current is not None:
        data.append({"type": "scatter", "x": [current[0]], "y": [current[1]], "mode": "markers", "name": "current step",
                     "marker": {"size": 14, "color": COLOURS["resampled"], "symbol": "diamond",
                                "line": {"color": "#000", "width": 1}}})
    fig = _figure(data, "The race: tokens against time", 340)
    _axes(fig, 1, {"title": {"text": "seconds (engine time)"}, "rangemode": "tozero"},
          {"title": {"text": "tokens"}, "rangemode": "tozero"})
    return fig


def theory_figure(theory: Theory | None) -> dict:
    """Expected speedup against gamma from the measured alpha and c, with the gamma used (and what was
    measured there) marked."""
    if theory is None:
        return empty_figure("Theory needs a run that drafted tokens.", 340)
    gammas, speedups = speedup_curve(theory.alpha, theory.cost_ratio)
    label = f"γ used ({theory.gamma:g})" if theory.gamma_fixed else f"mean γ used ({theory.gamma:.2f})"
    data = [
        {"type": "scatter", "x": gammas, "y": speedups, "mode": "lines+markers", "name": "expected speedup",
         "line": {"color": COLOURS["accepted"]}},
        {"type": "scatter", "x": [theory.gamma], "y": [theory.expected_speedup], "mode": "markers", "name": label,
         "marker": {"size": 14, "color": COLOURS["resampled"], "symbol": "diamond",
                    "line": {"color": "#000", "width": 1}}},
    ]
    if theory.measured_speedup is not None:
        data.append({"type": "scatter", "x": [theory.gamma], "y": [theory.measured_speedup], "mode": "markers",
                     "name": "measured", "marker": {"size": 12, "color": COLOURS["rejected"], "symbol": "x"}})
    fig = _figure(data, f"Expected speedup vs γ  (α = {theory.alpha:.2f}, c = {theory.cost_ratio:.3f})", 340)
    fig["layout"]["shapes"].append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                                    "line": {"color": "#999", "dash": "dot"}})
    _axes(fig, 1, {"title": {"text": "γ (draft tokens per step)"}, "dtick": 1},
          {"title": {"text": "speedup"}, "rangemode": "tozero"})
    return fig


def token_label(text: str) -> str:
    """A token as a chart label: spaces and newlines made visible, markup escaped."""
    return escape_label(text.replace(" ", "␣").replace("\n", "⏎") or "∅")


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


def _unique_labels(ids: list[int], token_text: Callable[[int], str]) -> list[str]:
    """Chart categories must be unique: two ids that decode alike get their ids appended."""
    labels = [token_label(token_text(i)) for i in ids]
    return [f"{label} ({i})" if labels.count(label) > 1 else label for label, i in zip(labels, ids)]


def _point_at(fig: dict, k: int, category: str, text: str, colour: str) -> None:
    """An arrow over one bar of the k-th panel."""
    fig["layout"]["annotations"].append({"x": category, "y": 1.0, "xref": f"x{_axis_id(k)}",
                                         "yref": f"y{_axis_id(k)} domain", "text": text, "showarrow": True,
                                         "arrowhead": 2, "arrowcolor": colour, "ax": 0, "ay": -18,
                                         "font": {"color": colour, "size": 11}})


def _token_name(text: str, token_id: int, token_text: Callable[[int], str]) -> str:
    """A token for a title: its text in the output, else what its id decodes to (a special token's name, such as
    the end of text, which the output shows as nothing)."""
    return token_label(text or token_text(token_id))


LABEL_PX = 22  # the page's label over a chart's top left corner ("Inspector"): the title starts below it


def inspector_figure(step: StepRecord | None, token_text: Callable[[int], str], sampling: bool,
                     narrow: bool = False) -> dict:
    """For each drafted position the verifier reached: the top tokens' p against q, the drafted token marked;
    then the distribution the step's last token was drawn from: the residual norm(max(0, p - q)) after a
    rejection, p itself after all drafts were accepted (the bonus), and that token marked. A step inside which
    the output ended (its end of text accepted, or the length reached) drew nothing: no such panel then.
    Tokens are categories on every axis (a draft "8" is a label, not a number). narrow: a phone's, each title
    on two lines."""
    if step is None:
        return empty_figure("Choose a step to inspect.", 300)
    reached = [pos for pos in step.positions if pos.reached]
    ended = step.emitted <= step.n_accepted  # the output ended at an accepted draft or at the length limit
    panels = len(reached) + (0 if ended else 1)
    if panels == 0:
        return empty_figure(f"Step {step.index} drafted nothing the verifier reached.", 300)
    br = "<br>" if narrow else " "
    titles, data, arrows = [], [], []
    for k, pos in enumerate(reached, start=1):
        verdict = "accepted" if pos.accepted else "rejected"
        q = "one-hot" if pos.q is None else f"{pos.q:.3f}"
        u = "" if pos.u is None else f", u = {pos.u:.3f}"
        titles.append(f"position {k}: {_token_name(pos.text, pos.token_id, token_text)} {verdict}:{br}p = {pos.p:.3f}, "
                      f"q = {q}, min(1, p/q) = {pos.accept_prob:.3f}{u}")
        ids = _union_top([pos.p_top, pos.q_top], INSPECTOR_TOP)
        if pos.token_id not in ids:
            ids.append(pos.token_id)
        labels = _unique_labels(ids, token_text)
        data.append(_on(_bar(labels, [_prob_of(pos.p_top, i) for i in ids], "p (target)", COLOURS["p"],
                             showlegend=k == 1, legendgroup="p"), k))
        if pos.q_top is not None:
            data.append(_on(_bar(labels, [_prob_of(pos.q_top, i) for i in ids], "q (drafter)", COLOURS["q"],
                                 showlegend=k == 1, legendgroup="q"), k))
        arrows.append((k, labels[ids.index(pos.token_id)], "drafted",
                       COLOURS["accepted"] if pos.accepted else COLOURS["rejected"]))
    kind = step.next_token.kind.value
    if not ended:
        residual = step.next_token.kind is TokenKind.RESAMPLED and sampling
        source = {"resampled": "residual max(0, p - q), renormalised" if sampling else "p (greedy: its argmax)",
                  "bonus": "p after every draft was accepted", "target": "p (a plain step)"}.get(kind, "p")
        titles.append(f"{kind} token {_token_name(step.next_token.text, step.next_token.id, token_text)}:{br}"
                      f"drawn from {source}")
        ids = list(step.next_top.ids[:INSPECTOR_TOP])
        if step.next_token.id not in ids:
            ids.append(step.next_token.id)
        labels = _unique_labels(ids, token_text)
        data.append(_on(_bar(labels, [_prob_of(step.next_top, i) for i in ids],
                             "residual (drawn from)" if residual else "p (drawn from)",
                             COLOURS["residual"] if residual else COLOURS["drawn"]), panels))
        arrows.append((panels, labels[ids.index(step.next_token.id)], "drawn", COLOURS.get(kind, "#000")))
    has_q = any(pos.q_top is not None for pos in reached)
    what = "p against q" if has_q else f"p (the drafter gives no q:{br}its guess is one-hot)"
    title = f"Step {step.index}: {what}{br}at each drafted position"
    if ended:
        last = reached[-1]
        title += (f"{br}(the output ends at {_token_name(last.text, last.token_id, token_text)}:{br}"
                  "nothing is drawn after it)")
    # in pixels: a panel, the gap under it (its tick labels, then the next panel's arrow band and title), and
    # the top margin (the figure's title, the first arrow band and title)
    title_lines, panel_title_lines = title.count("<br>") + 1, 2 if narrow else 1
    panel_px, gap_px = 150, 40 + 30 + 16 * panel_title_lines
    top = LABEL_PX + 24 + 18 * title_lines + 30 + 16 * panel_title_lines
    plot_px = panels * panel_px + (panels - 1) * gap_px
    fig = _figure(data, title, plot_px + top + 100, panels, 1, titles, vgap=gap_px / plot_px)
    fig["layout"]["title"].update({"yref": "container", "y": 1, "yanchor": "top", "pad": {"t": 16 + LABEL_PX}})
    fig["layout"]["margin"] = {**fig["layout"]["margin"], "t": top}
    for annotation in fig["layout"]["annotations"]:
        annotation["yshift"] = 30  # above the arrow band, where "drafted" and "drawn" stand
    fig["layout"]["barmode"] = "group"
    if narrow:
        fig["layout"]["margin"].update({"l": 45, "r": 10})
    for k in range(1, panels + 1):
        _axes(fig, k, {"type": "category"}, {"range": [0, 1.05], "title": {"text": "prob"}})
    for k, category, text, colour in arrows:
        _point_at(fig, k, category, text, colour)
    return fig


def compare_figure(rows: list[dict]) -> dict:
    """Per method: tokens/s (plain included) and tokens per step."""
    if not rows:
        return empty_figure("Results appear here method by method.", 340)
    names = [escape_label(r["method"]) for r in rows]
    colours = [COLOURS["plain"] if r["method"] == "plain" else COLOURS["accepted"] for r in rows]
    data = [
        _on({"type": "bar", "x": names, "y": [r["tokens_per_second"] for r in rows], "marker": {"color": colours},
             "text": [f"{r['tokens_per_second']:.1f}" for r in rows], "textposition": "auto", "showlegend": False,
             "name": "tok/s"}, 1),
        _on({"type": "bar", "x": names, "y": [r["tau"] for r in rows], "marker": {"color": colours},
             "text": [f"{r['tau']:.2f}" for r in rows], "textposition": "auto", "showlegend": False, "name": "τ"}, 2),
    ]
    return _figure(data, "Methods on one prompt", 360, 1, 2, ("tokens/s (engine time)", "tokens per step τ"))


def cost_figure(points: list[CostPoint], device: str) -> dict:
    """Forward time against new positions K (batch 1) and against batch size B (one position each)."""
    if not points:
        return empty_figure("Press Measure to time the target on this machine.", 340)
    fig = _figure([], f"Target forward time on {escape_label(device)}", 380, 1, 2,
                  ("one forward, K new positions (batch 1)", "one forward, batch B (1 new position each)"))
    for k, axis, label in ((1, "positions", "K"), (2, "batch", "B")):
        chosen = [p for p in points if p.axis == axis]
        xs = [p.x for p in chosen]
        fig["data"].append(_on({"type": "scatter", "x": xs, "y": [p.ms for p in chosen], "mode": "lines+markers",
                                "name": f"ms per forward ({label})", "line": {"color": COLOURS["accepted"]}}, k))
        fig["data"].append(_on({"type": "scatter", "x": xs, "y": [p.ms / p.x for p in chosen], "mode": "lines+markers",
                                "name": f"ms per position ({label})",
                                "line": {"color": COLOURS["resampled"], "dash": "dash"}}, k))
        _axes(fig, k,
              {"title": {"text": label}, **({"type": "log", "tickvals": xs} if axis == "batch" else {"dtick": 1})},
              {"title": {"text": "ms"}, "rangemode": "tozero"})
    return fig


def batch_figure(summary: list[dict], device: str, method: str, costs: list[dict] = ()) -> dict:
    """Speculation's speedup over plain decoding against batch size and both methods' tokens/s (from
    batch_bench.summarize_batches), the first batch size where speculation no longer pays marked; with costs
    ({batch_size, ratio}: a verify pass's forward time over a plain step's, same batch), the reason beside."""
    if not summary:
        return empty_figure("Press Measure to decode batches of the example prompts on this machine.", 340)
    panels = ("speedup over plain decoding of the same batches", "tokens/s of the whole batch",
              "a verify pass against a plain step (forward time)")
    fig = _figure([], f"{escape_label(method)} against plain decoding, by batch size, on {escape_label(device)}", 400,
                  1, 3 if costs else 2, panels[:3 if costs else 2])
    ours = [s for s in summary if s["method"] == method]
    plain = [s for s in summary if s["method"] == "plain"]
    xs = [s["batch_size"] for s in ours]
    fig["data"].append(_on({"type": "scatter", "x": xs, "y": [s["speedup"] for s in ours], "mode": "lines+markers",
                            "name": f"{escape_label(method)} speedup", "line": {"color": COLOURS["accepted"]}}, 1))
    fig["data"].append(_on({"type": "scatter", "x": xs, "y": [1.0] * len(xs), "mode": "lines", "name": "break-even",
                            "line": {"color": COLOURS["plain"], "dash": "dot"}}, 1))
    for rows, name, colour in ((plain, "plain", COLOURS["plain"]), (ours, method, COLOURS["accepted"])):
        fig["data"].append(_on({"type": "scatter", "x": [s["batch_size"] for s in rows],
                                "y": [s["tokens_per_second"] for s in rows], "mode": "lines+markers",
                                "name": f"{escape_label(name)} tok/s", "line": {"color": colour}}, 2))
    if costs:
        fig["data"].append(_on({"type": "scatter", "x": [c["batch_size"] for c in costs],
                                "y": [c["ratio"] for c in costs], "mode": "lines+markers",
                                "name": "verify / plain step", "line": {"color": COLOURS["verify"]}}, 3))
    losing = [s["batch_size"] for s in ours if s["speedup"] <= 1.0]
    if losing:
        # on a log axis plotly places an annotation at log10 of its position (else it stretches the axis to 10^x)
        fig["layout"]["annotations"].append({"text": f"stops paying at batch {min(losing)}",
                                             "x": math.log10(min(losing)), "y": 1.0,
                                             "xref": "x", "yref": "y", "showarrow": True, "arrowhead": 2,
                                             "font": {"color": COLOURS["rejected"]}})
    for k, unit in ((1, "x"), (2, "tok/s"), (3, "x"))[:3 if costs else 2]:
        _axes(fig, k, {"title": {"text": "batch size"}, "type": "log", "tickvals": xs},
              {"title": {"text": unit}, "rangemode": "tozero"})
    return fig
