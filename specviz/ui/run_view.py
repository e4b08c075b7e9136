"""The Run tab's view of a run: the widget values (frames) that show a LiveRun or a RecordedRun, and the frames
streamed while a worker advances one, as few as pacing.Pacer lets through: a token update at most every
TOKEN_INTERVAL, a chart update every CHART_INTERVAL (docs/design.md, "Pitfalls")."""
from __future__ import annotations

import time

import gradio as gr

from . import charts, render, view
from .cancel import Cancel
from ..service.live import LiveRun
from ..service.recorded_runs import RecordedRun
from .pacing import Pacer
from .readouts import (drafts_at_once, engine_metrics, plot, status_of, step_story, summary_of, token_text, token_view,
                       trace_file)

# seconds between token-view updates while streaming: each costs a browser on the same machine tens of ms of CPU
# whatever it carries (a status line alone as much as the token view), taken from the engine (docs/app.md)
TOKEN_INTERVAL = 1.0
CHART_INTERVAL = 2.0  # seconds between chart updates while streaming
# seconds no step starts after an update is sent, so that a browser on the same cores draws it between steps
# rather than during one (live.LiveRun.hold): a token view, and one with charts (plotly's redraw costs more)
DRAW_HOLD, CHART_DRAW_HOLD = 0.1, 0.25


class RunView:
    """Frames of the Run tab's widgets, which a subclass builds (status, tokens, summary, step_slider, step_plot,
    race_plot, theory_plot, inspector, trace)."""

    # ---- frames: dicts {component: value}; components left out keep their value -------------------------
    def frame(self, run: LiveRun, cursor: int | None = None, upto: int | None = None,
              parts: frozenset = frozenset({"text", "slider", "charts", "race", "detail"}),
              narrow: bool = False) -> dict:
        """Widget values for the run; parts picks what to redraw: "text" (token view, summary), "slider" (the
        step slider), "charts" (step charts), "race", "detail" (theory, inspector). The status always. narrow:
        the page is a phone's (the step charts stacked)."""
        steps = run.speculative.steps
        sampling = not run.request.settings.greedy
        shown = cursor if cursor is not None else (len(steps) - 1 if steps else None)
        out = {self.status: status_of(run, cursor)}
        at_once = drafts_at_once(run)
        if "text" in parts:
            story = step_story(steps[shown], sampling, at_once) if shown is not None and shown < len(steps) else ""
            out[self.tokens] = token_view(run, cursor, upto, story)
            out[self.summary] = summary_of(run)
        if "slider" in parts:
            out[self.step_slider] = gr.Slider(minimum=0, maximum=max(len(steps) - 1, 1), value=shown or 0,
                                              interactive=bool(steps))
        if "charts" in parts:
            out[self.step_plot] = plot(charts.step_figure(steps[: upto + 1] if upto is not None else steps, cursor,
                                                          narrow, at_once))
        if "race" in parts:
            out[self.race_plot] = plot(self._race(run, cursor))
        if "detail" in parts:
            metrics = engine_metrics(run.speculative)
            theory = view.theory(metrics, steps, run.request.settings.gamma, run.speedup) if metrics else None
            out[self.theory_plot] = plot(charts.theory_figure(theory))
            step = steps[shown] if shown is not None and shown < len(steps) else None
            out[self.inspector] = plot(charts.inspector_figure(step, token_text(run.tokenizer), sampling, narrow))
        if run.finished:
            out[self.trace] = trace_file(run)
        return out

    def blank(self, status: str) -> dict:
        """The view with no run in it, under a status line: what a new run starts from, and what a run that
        could not start leaves (never the previous run's tokens under its error)."""
        return {self.status: status, self.tokens: render.token_view_html([]), self.summary: "",
                self.step_plot: None, self.race_plot: None, self.theory_plot: None, self.inspector: None,
                self.step_slider: gr.Slider(minimum=0, maximum=1, value=0, interactive=False), self.trace: None}

    def _race(self, run: LiveRun, cursor: int | None):
        spec = run.speculative
        spec_points = view.race_points(spec.steps, [spec.engine_elapsed(i) for i in range(len(spec.steps))])
        plain_points = None
        if run.plain is not None and run.plain.steps:
            plain = run.plain
            plain_points = view.race_points(plain.steps, [plain.engine_elapsed(i) for i in range(len(plain.steps))])
        current = None
        if cursor is not None and cursor < len(spec.steps):
            current = (spec_points[0][cursor + 1], spec_points[1][cursor + 1])
        return charts.race_figure(spec_points, plain_points, run.request.method, current)

    def stream(self, run: LiveRun | RecordedRun, cancel: Cancel | None = None, follow_cursor: bool = False,
               narrow: bool = False):
        """Frames while a worker advances the run, as few as pacing.Pacer lets through (the theory and the
        inspector wait for the end, except in step mode); then one complete frame. follow_cursor highlights
        the newest step (step mode). A set `cancel` stops the run (after its current step)."""
        pacer = Pacer(TOKEN_INTERVAL, CHART_INTERVAL, time.monotonic(), follow_cursor)
        while run.active:
            if cancel is not None and cancel.is_set():
                run.stop()
                run.join(0.05)
            n = len(run.speculative.steps)
            parts = pacer.parts(time.monotonic(), run.version, n, run.phase)
            if parts is not None:
                hold = CHART_DRAW_HOLD if parts & {"charts", "race", "detail"} else DRAW_HOLD
                run.hold(hold)  # while the frame is built and sent
                yield self.frame(run, cursor=n - 1 if follow_cursor and n else None, parts=parts, narrow=narrow)
                run.hold(hold)  # and while the page draws it: gradio asks for the next frame once this one is sent
            time.sleep(0.03)
        n = len(run.speculative.steps)
        yield self.frame(run, cursor=n - 1 if follow_cursor and n else None, narrow=narrow)
        if cancel is not None and cancel.reason:
            yield {self.status: render.status_html(cancel.reason, "warn")}
