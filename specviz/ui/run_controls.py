"""The Run tab's controls on a run that exists: Stop, Pause, Resume, Next step, Replay and the step slider."""
from __future__ import annotations

import asyncio
import time

import gradio as gr

from . import charts, render, run_view
from .cancel import Cancel
from .form import Form
from ..service.live import LiveRun
from ..service.recorded_runs import RecordedRun
from .sessions import Session, existing_session_of
from .readouts import drafts_at_once, plot, replay_status, step_story, token_text, token_view
from .run_view import RunView


class RunControls(RunView):
    """The controls' handlers: each (but Stop and Pause, which need no form) takes the Form read at the boundary
    (endpoint.form_handler), its session and its stop signal; an error it raises is shown in the status line."""

    def on_stop(self, request: gr.Request):
        state = existing_session_of(request)
        state.replaying = False
        state.stop_all()
        run = state.run
        if run is None:
            return {self.status: render.status_html("Stopped.", "warn", "none")}
        run.stop()
        run.join(timeout=10)
        return self.frame(run, narrow=state.narrow)

    def on_pause(self, request: gr.Request):
        state = existing_session_of(request)
        state.replaying = False
        if state.run is not None and state.run.active:
            if isinstance(state.run, RecordedRun):
                return {self.status: render.status_html(
                    "Here each run is computed in one GPU call, so it cannot pause: use step mode, or Replay it "
                    "when it is done.", "info")}
            state.run.pause()
            return {self.status: render.status_html("Pausing after the current step…", "info")}
        return {self.status: render.status_html("Nothing to pause: press Run (or Replay).", "info")}

    def handle_resume(self, form: Form, state: Session, cancel: Cancel):
        run = state.run
        if run is None or run.finished:
            yield {self.status: render.status_html("Nothing to resume: press Run.", "info")}
            return
        state.cursor = None
        if run.start() or isinstance(run, RecordedRun):
            try:
                yield from self.stream(run, cancel, narrow=state.narrow)
            finally:
                if run.active and cancel.is_set():
                    run.stop()

    def handle_next(self, form: Form, state: Session, cancel: Cancel):
        run = state.run
        if run is None:
            yield {self.status: render.status_html("Press Run first (tick step mode to start paused).", "info")}
            return
        steps = run.speculative.steps
        if isinstance(run, LiveRun) and not run.finished and not run.speculative.done:
            taken = run.take_steps(1)  # a click while a step is pending queues one more (trigger_mode below)
            if taken is None:
                yield {self.status: render.status_html("The run is going: press Pause first.", "warn")}
                return
            if taken == "queued":
                yield {self.status: render.status_html("One more step after this one…", "info")}
            # a queued click follows the run to its pause too: its note can reach the page after the other
            # click's last frame, and a frame of its own must come after the note
            yield from self.stream(run, cancel, follow_cursor=True, narrow=state.narrow)
            state.cursor = len(run.speculative.steps) - 1 if run.speculative.steps else None
            return
        if run.active:
            yield {self.status: render.status_html("The run is going: press Pause first.", "warn")}
            return
        if not steps:
            yield {self.status: render.status_html("This run has no steps.", "info")}
            return
        state.cursor = 0 if state.cursor is None or state.cursor >= len(steps) - 1 else state.cursor + 1
        yield self.frame(run, cursor=state.cursor, upto=state.cursor, narrow=state.narrow)

    async def handle_replay(self, form: Form, state: Session, cancel: Cancel):
        """The finished run again, one step a frame: the token view and the step number every frame, the charts
        and the inspector at most every CHART_INTERVAL (a browser cannot redraw them every 0.1 s) and on the
        last frame. No wait after the last frame, so that a Replay pressed as one ends starts a new one. It
        waits between frames without holding a worker thread (a frame is built in one), and a page replays one
        run at a time (the queue's door also bounds replays: admission.py)."""
        run = state.run
        if run is None or not run.speculative.steps:
            yield {self.status: render.status_html("Nothing to replay: press Run first.", "info")}
            return
        if run.active:
            yield {self.status: render.status_html("The run is going: replay it when it is done.", "warn")}
            return
        if state.replaying:
            yield {self.status: render.status_html("A replay is already going in this page: wait for it to end or "
                                                   "press Stop.", "warn")}
            return
        token = state.replaying = object()  # Stop (or a new run) clears it; this replay then ends
        try:
            delay = min(max(form.seconds_per_step, 0.05), 5.0)
            last = len(run.speculative.steps) - 1
            charted = 0.0
            for k in range(last + 1):
                if state.replaying is not token or cancel.is_set():
                    break
                state.cursor = k
                parts = {"text", "slider"}
                if k == last or time.monotonic() - charted >= run_view.CHART_INTERVAL:
                    parts |= {"charts", "race", "detail"}
                    charted = time.monotonic()
                frame = await asyncio.to_thread(self.frame, run, cursor=k, upto=k, parts=frozenset(parts),
                                                narrow=state.narrow)
                yield frame | {self.status: replay_status(run, k)}
                if k < last:
                    await asyncio.sleep(delay)
        finally:
            if state.replaying is token:
                state.replaying = False

    def handle_inspect(self, form: Form, state: Session, cancel: Cancel):
        run = state.run
        if run is None or not run.speculative.steps:
            return {self.tokens: gr.skip()}  # (an empty dict would read as one value)
        k = min(form.step, len(run.speculative.steps) - 1)
        state.cursor = k
        steps = run.speculative.steps
        sampling = not run.request.settings.greedy
        return {
            self.tokens: token_view(run, k, story=step_story(steps[k], sampling, drafts_at_once(run))),
            self.inspector: plot(charts.inspector_figure(steps[k], token_text(run.tokenizer),
                                                         not run.request.settings.greedy, state.narrow)),
            self.step_plot: plot(charts.step_figure(steps, k, state.narrow, drafts_at_once(run))),
            self.race_plot: plot(self._race(run, k)),
        }
