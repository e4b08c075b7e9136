"""A live run: the speculative run and its plain baseline, advanced by a worker thread while the UI polls what
it has produced (LiveRun), each step under the engine lock (engine_lock.py) and counted on engine time
(stepped_runs.py).

The two are measured under the same conditions, on a machine shared with other users and with the browser that
draws the run: they take turns in short slices (the speculative run for SLICE_SECONDS of engine time, then plain
decoding until it has written as many tokens), so that a busy stretch of the machine lands on both; each update
the page is sent holds the engine for a moment (LiveRun.hold), so that the page draws it between steps rather
than during one; and the speedup is checked against the run's own figures (specviz.measure.plausibility) before
it is stated without a note.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid

import torch

from ..engine.run import SpeculativeRun
from ..errors import SpecvizError
from ..measure.plausibility import drafting_share, speedup_doubt
from ..models.loading import LoadedModel
from ..proposers import PlainProposer
from . import serving
from .engine_lock import current_charge, metering
from .gpu_worker import Preparation
from .run_request import RunRequest
from .run_setup import RunSetup
from .stepped_runs import SteppedRun

log = logging.getLogger(__name__)


# phases of a LiveRun
READY, RUNNING, PAUSED, BASELINE, DONE, STOPPED, FAILED = (
    "ready",
    "running",
    "paused",
    "baseline",
    "done",
    "stopped",
    "failed",
)


SLICE_SECONDS = 0.2  # engine time the speculative run takes before plain decoding catches up with it: long
# enough that a GPU's step left in flight at a switch (device_loop.py) is a small share of a slice


class LiveRun:
    """The speculative run and its plain baseline, advanced by a worker thread or one step at a time."""

    def __init__(self, request: RunRequest, target: LoadedModel, draft: LoadedModel | None,
                 setup: RunSetup | None = None):
        self.id = uuid.uuid4().hex[:12]
        self.request = request
        self.target: LoadedModel | None = target  # dropped when the run ends, so that a model switch frees memory
        self.draft: LoadedModel | None = draft
        self.tokenizer = target.tokenizer  # kept: the inspector decodes token ids after the run
        self.target_label = target.describe()
        self.device_label = f"{target.device.type}, {str(target.dtype).replace('torch.', '')}"
        self._pool = serving.pool()
        self._held = self._pool.hold(request.target, request.draft)  # its models stay loaded until it ends
        try:
            if setup is None:  # made and prepared here, as long as that takes (a GPU of its own)
                setup = RunSetup.make(request, target, draft)
                setup.prepare()
            prompt_ids, options = setup.prompt_ids, setup.options
            self.speculative = SteppedRun(SpeculativeRun(target, setup.proposer, prompt_ids, request.settings,
                                                         request.prompt, options=options))
            self.plain = (SteppedRun(SpeculativeRun(target, PlainProposer(), prompt_ids, request.settings,
                                                    request.prompt, options=options)) if request.compare_plain
                          else None)
        except BaseException:
            self._pool.release(self._held)
            raise
        self.preparation: Preparation | None = setup.preparation
        self.prompt_tokens = len(prompt_ids)
        self.phase = READY
        self.error: str | None = None
        self.paused_ever = False
        self.version = 0  # bumped at every step: the UI redraws only when it changed
        self.trace_path: str | None = None  # the exported trace, once written
        self._stop = threading.Event()
        self._pause = threading.Event()
        self._mutex = threading.Lock()  # one driver at a time (the worker or a single step)
        self._thread: threading.Thread | None = None
        self._control = threading.Lock()  # the step budget, between the worker and Next step's clicks
        self._budget: int | None = None  # speculative steps this worker takes (None: to the end)
        self._after_pause = 0  # Next step clicks that came after Pause, before the worker reached the pause
        self.turn = "speculative"  # whose step the worker takes now (the race's turns): "speculative" or "plain"
        self._ending = False  # the worker has taken its last step and is on its way out
        self._held_until = 0.0  # time.monotonic() before which no step starts: the page is drawing
        self._charge = None  # where the worker's engine time is charged (metering)

    # -- control ------------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """A worker is advancing the run."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def stepping(self) -> bool:
        """A worker takes a counted number of steps (Next step), then pauses."""
        return self.active and self._budget is not None

    @property
    def pausing(self) -> bool:
        """The worker has taken its last speculative step and is on its way to a pause (plain decoding catching
        up to the same point first)."""
        return self.active and self._ending and self.phase == RUNNING

    @property
    def finished(self) -> bool:
        return self.phase in (DONE, STOPPED, FAILED)

    def start(self, max_steps: int | None = None) -> bool:
        """Advance in a worker thread: all the way (then the baseline), or `max_steps` speculative steps and
        pause. False when it cannot (already advancing, or over)."""
        return self.take_steps(max_steps) == "started"

    def take_steps(self, count: int | None = None) -> str | None:
        """Advance by `count` speculative steps (None: to the end). "started": a worker now takes them;
        "queued": the worker already taking single steps (Next step) takes these too, after its own, so that
        quick clicks each count; None: it cannot (advancing to the end already, or over)."""
        with self._control:
            if self.active and not self._ending:
                if count is not None and self._pause.is_set():
                    self._after_pause += count  # taken once the worker reaches the pause (_last_step_taken)
                    return "queued"
                if count is None or self._budget is None:
                    return None
                self._budget += count
                return "queued"
            if self._thread is not None:
                self._thread.join()  # a worker past its last step: it only has to return
            if self.finished:
                return None
            self._budget, self._ending, self._after_pause = count, False, 0
            self._charge = current_charge()  # the worker's engine time is its starter's
            self._pause.clear()
            self._thread = threading.Thread(target=self._work, name=f"specviz-run-{self.id}", daemon=True)
            self.phase = RUNNING if not self.speculative.done else BASELINE
            self._thread.start()
            return "started"

    def hold(self, seconds: float) -> None:
        """Start no step for `seconds`: the page is drawing an update, on the same cores on a laptop, and that
        time is kept out of the measured steps (the wait is counted as idle, like a pause)."""
        self._held_until = max(self._held_until, time.monotonic() + seconds)

    def pause(self) -> None:
        self._pause.set()

    def stop(self) -> None:
        """End the run after its current step; frees its caches. Safe to call from any thread, any number of times."""
        self._stop.set()
        if not self.active and not self.finished:
            with self._mutex:
                self._finish(STOPPED)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the worker ---------------------------------------------------------------------------------------
    def _work(self) -> None:
        with self._mutex, metering(self._charge):
            try:
                taken, slice_start = 0, None
                while not self.speculative.done and not self._stop.is_set():
                    if self._last_step_taken(taken):
                        self._catch_up()  # step mode: the race shows both runs at the same point
                        self.phase = PAUSED
                        self.paused_ever = True
                        return
                    if slice_start is None:
                        slice_start = self._spec_seconds()
                    self._advance(self.speculative)
                    taken += 1
                    if self.speculative.done or self._spec_seconds() - slice_start >= SLICE_SECONDS:
                        self._catch_up()
                        slice_start = None
                if self.plain is not None and not self._stop.is_set():
                    self.phase = BASELINE  # what plain decoding writes past the speculative run's end (sampling)
                    while not self.plain.done and not self._stop.is_set():
                        self._advance(self.plain)
                self._finish(STOPPED if self._stop.is_set() else DONE)
            except SpecvizError as error:
                self.error = str(error)
                self._finish(FAILED)
            except Exception as error:  # a model that fails mid-run (e.g. out of memory): show it, keep serving
                log.exception("run %s failed", self.id)
                self.error = f"{type(error).__name__}: {error}"
                self._finish(FAILED)

    def _last_step_taken(self, taken: int) -> bool:
        """Whether the worker stops here (Pause, or its step budget spent); decided under the control lock, so
        that a Next step clicked meanwhile either extends the budget or starts a new worker, never neither. Next
        step clicked after Pause, before the worker got here, takes its steps from here on: the pause's step, then
        one more a click."""
        with self._control:
            if self._pause.is_set() and self._after_pause:
                self._pause.clear()
                self._budget, self._after_pause = taken + self._after_pause, 0
                self.paused_ever = True
            if self._pause.is_set() or (self._budget is not None and taken >= self._budget):
                self._ending = True
            return self._ending

    def _spec_seconds(self) -> float:
        spec = self.speculative
        return spec.engine_elapsed(len(spec.steps) - 1) if spec.steps else 0.0

    def _catch_up(self) -> None:
        """Plain decoding's turn: steps until it has written as many tokens as the speculative run."""
        while (self.plain is not None and not self.plain.done and not self._stop.is_set()
               and self.plain.emitted < self.speculative.emitted):
            self._advance(self.plain)

    def _advance(self, stepped: SteppedRun) -> None:
        wait = self._held_until - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self.turn = "plain" if stepped is self.plain else "speculative"
        stepped.advance()
        self.version += 1

    def _finish(self, phase: str) -> None:
        self.speculative.close()
        if self.plain is not None:
            self.plain.close()
        self.target = self.draft = None
        if self._held:
            self._pool.release(self._held)
            self._held = ()
        self.phase = phase
        self.version += 1
        if phase != DONE and torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- what it measured ---------------------------------------------------------------------------------
    @property
    def speedup(self) -> float | None:
        """Plain engine time over speculative engine time (equal to wall times when nothing waited)."""
        if self.plain is None or not (self.speculative.done and self.plain.done):
            return None
        return self.plain.engine_wall / self.speculative.engine_wall

    @property
    def doubt(self) -> str | None:
        """Why the speedup is not to be trusted (specviz.measure.plausibility), or None: also None before it exists."""
        speedup = self.speedup
        if speedup is None:
            return None
        spec = self.speculative
        tau = spec.result.metrics.mean_accepted_length
        m = spec.result.metrics
        return speedup_doubt(speedup, tau, self.plain.durations, spec.durations, [s.gamma for s in spec.steps],
                             drafting=drafting_share(m.draft_seconds, m.verify_seconds))

    def report(self):
        """specviz.api.Report of the finished run (None until the speculative run has a result)."""
        from ..api import Report

        if not self.speculative.done:
            return None
        return Report(self.speculative.result, self.plain.result if self.plain is not None and self.plain.done
                      else None)

