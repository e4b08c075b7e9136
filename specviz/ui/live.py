"""Driving engine runs for the app, with no gradio in it (so that it is tested on its own).

Every engine step runs under one process-wide FIFO lock: several users' runs interleave step by step instead
of fighting over the cores, and each run counts the time it spent suspended between steps (waiting for the
lock, or paused in step mode). Speeds are then given on engine time, which equals the engine's own wall time
when nobody else is running and nothing was paused.

A LiveRun is the speculative run and its plain baseline; a worker thread advances it while the UI polls what
it has produced. The two are measured under the same conditions, on a machine shared with other users and with
the browser that draws the run: they take turns in short slices (the speculative run for SLICE_SECONDS of
engine time, then plain decoding until it has written as many tokens), so that a busy stretch of the machine
lands on both; each update the page is sent holds the engine for a moment (LiveRun.hold), so that the page
draws it between steps rather than during one; and the speedup is checked against the run's own figures
(specviz.measure.plausibility) before it is stated without a note.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch

from .. import methods as registry
from ..api import encode, make_proposer, warm_up
from ..engine.run import SpeculativeRun
from ..errors import SpecvizError
from .gpu_worker import Preparation, needs_preparing, this_worker
from .gpu_worker import prepare as prepare_in_worker
from .model_pool import ModelPool
from ..models.loading import DEFAULT_MODEL, LoadedModel, load_model, pick_device, pick_dtype
from ..options import EngineOptions
from ..measure.plausibility import speedup_doubt, step_durations
from ..proposers import PlainProposer
from ..proposers.checkpoints import load_draft_model
from ..proposers.distilled import DISTILLED
from ..records.metrics import summarize
from .public import Profile, check_prompt_tokens, profile_from_env
from ..records.schema import RunResult, StepRecord
from ..runners.graphs import graph_span
from ..settings import DecodeSettings
from .cancel import Cancel
from .form import MAX_NEW_TOKENS, message_of, read_form
from .gpu import CAPTURE_SECONDS, forks

log = logging.getLogger(__name__)


_meter = threading.local()  # what the engine time this thread takes is charged to (metering)


@contextlib.contextmanager
def metering(charge):
    """Charge the engine time this thread holds ENGINE_LOCK for, until the block ends, to charge(seconds) (the
    public profile's budget of engine seconds per client address); None charges nothing."""
    previous = getattr(_meter, "charge", None)
    _meter.charge = charge
    try:
        yield
    finally:
        _meter.charge = previous


def current_charge():
    """The charge this thread's engine time goes to now (a worker thread takes its starter's)."""
    return getattr(_meter, "charge", None)


class FairLock:
    """A lock that is handed out in arrival order (threading.Lock is not fair: a thread that releases and
    re-acquires at once would keep it, and one user's run would starve the others). The time each holder keeps
    it is charged to the holder's thread's meter (metering)."""

    def __init__(self):
        self._condition = threading.Condition()
        self._next_ticket = 0
        self._serving = 0
        self._held_since = 0.0  # one holder at a time: when the present one got it

    def __enter__(self):
        with self._condition:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._condition.wait_for(lambda: self._serving == ticket)
        self._held_since = time.perf_counter()
        return self

    def __exit__(self, *exc):
        held = time.perf_counter() - self._held_since
        with self._condition:
            self._serving += 1
            self._condition.notify_all()
        charge = current_charge()
        if charge is not None:
            charge(held)

    @property
    def waiting(self) -> int:
        """Holders and waiters (0 when free)."""
        with self._condition:
            return self._next_ticket - self._serving


ENGINE_LOCK = FairLock()


def _is_last(step: StepRecord, run: SpeculativeRun) -> bool:
    """Whether the engine's loop ends after this step (its two exits: max-new-tokens and EOS)."""
    if step.total_emitted >= run.settings.max_new_tokens:
        return True
    emitted = step.emitted_tokens
    return bool(run.settings.stop_at_eos and emitted and emitted[-1].id in run.target.eos_token_ids)


class StepLog:
    """A run's records as they come: its steps, the engine time it spent suspended before each, its result.
    What the app draws reads only this (a run driven here, or one computed in a forked GPU call)."""

    def __init__(self, method: str, settings: DecodeSettings):
        self.method = method
        self.settings = settings  # the engine's (its tree is 0 where the method or runner drafts chains)
        self.steps: list[StepRecord] = []
        self.idle_before: list[float] = []  # idle seconds accumulated up to each step
        self.idle_seconds = 0.0  # time the engine spent suspended between steps
        self.result: RunResult | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def closed(self) -> bool:
        return True

    def engine_elapsed(self, index: int) -> float:
        """Seconds of engine time from the start of the run to the end of step `index`."""
        return self.steps[index].elapsed_s - self.idle_before[index]

    @property
    def emitted(self) -> int:
        """Output tokens so far."""
        return self.steps[-1].total_emitted if self.steps else 0

    @property
    def durations(self) -> list[float]:
        """Each step's seconds of engine time (the first one's include the prefill)."""
        return step_durations([self.engine_elapsed(i) for i in range(len(self.steps))])

    @property
    def engine_wall(self) -> float | None:
        if self.result is None:
            return None
        return max(self.result.metrics.wall_seconds - self.idle_seconds, 1e-9)

    @property
    def engine_tokens_per_second(self) -> float | None:
        wall = self.engine_wall
        return None if wall is None else self.result.metrics.new_tokens / wall


def engine_result(log: StepLog) -> RunResult:
    """A finished run's result with its times on engine time: each step's elapsed time and the run's wall time
    without the time it spent suspended while other users' steps ran (its speeds then are its own)."""
    result = log.result
    steps = [dataclasses.replace(step, elapsed_s=log.engine_elapsed(i)) for i, step in enumerate(log.steps)]
    metrics = summarize(steps, result.metrics.new_tokens, log.engine_wall, result.metrics.prefill_seconds)
    return dataclasses.replace(result, steps=steps, metrics=metrics)


class SteppedRun(StepLog):
    """A SpeculativeRun advanced one step at a time under ENGINE_LOCK."""

    def __init__(self, run: SpeculativeRun):
        super().__init__(run.proposer.name, run.settings)
        self.run: SpeculativeRun | None = run
        self._iterator = iter(run)
        self._suspended_at: float | None = None

    @property
    def closed(self) -> bool:
        return self.run is None

    def advance(self) -> StepRecord | None:
        """Run one step (the first one includes the prefill). None once the run has ended."""
        if self.run is None:
            return None
        with ENGINE_LOCK:
            now = time.perf_counter()
            if self._suspended_at is not None:
                self.idle_seconds += now - self._suspended_at
            try:
                step = next(self._iterator)
                if _is_last(step, self.run):  # let the engine finish now, so that `result` is set with the step
                    next(self._iterator, None)
            except StopIteration:
                step = None
            self._suspended_at = time.perf_counter()
        if step is not None:
            self.steps.append(step)
            self.idle_before.append(self.idle_seconds)
        if self.run.result is not None:
            self.result = self.run.result
            self.close()
        return step

    def close(self) -> None:
        """Drop the engine objects (KV caches, proposer state); the steps and the result stay."""
        if self.run is not None:
            self._iterator.close()
            self.run = None
            self._iterator = None


# phases of a LiveRun
READY, RUNNING, PAUSED, BASELINE, DONE, STOPPED, FAILED = "ready", "running", "paused", "baseline", "done", "stopped", "failed"


SLICE_SECONDS = 0.2  # engine time the speculative run takes before plain decoding catches up with it: long
# enough that a GPU's step left in flight at a switch (device_loop.py) is a small share of a slice
USES_DRAFT_MODEL = registry.names(uses_draft_model=True)  # methods that take the drafter field (adaptive drafts with it if given)


@dataclass
class RunRequest:
    prompt: str
    method: str
    target: str = DEFAULT_MODEL
    draft: str | None = None
    settings: DecodeSettings = field(default_factory=DecodeSettings)
    compare_plain: bool = True
    exact: bool | None = None  # the exact mode of the target's forward (a GPU's); None: as the environment says


def engine_options(request: RunRequest) -> EngineOptions:
    """The engine's switches for a request's runs: the environment's, with the request's exact mode."""
    options = EngineOptions.from_environment()
    return options if request.exact is None else replace(options, exact=request.exact)


@dataclass
class RunSetup:
    """What a run is made of before it starts (its proposer, prompt ids and engine options), and how it was
    prepared: made, then prepared (on ZeroGPU the page says so while that captures graphs), then run."""

    request: RunRequest
    target: LoadedModel
    draft: LoadedModel | None
    options: EngineOptions
    proposer: object
    prompt_ids: list[int]
    preparation: Preparation | None = None

    @classmethod
    def make(cls, request: RunRequest, target: LoadedModel, draft: LoadedModel | None) -> "RunSetup":
        options = engine_options(request)
        proposer = make_proposer(request.method, target, draft, options=options)
        return cls(request, target, draft, options, proposer, encode_prompt(target, request.prompt))

    @property
    def runs(self) -> int:
        """Runs that hold a target runner at once: the run, and its plain baseline beside it."""
        return 2 if self.request.compare_plain else 1

    def needs_preparing(self) -> bool:
        """Whether preparing captures graphs: the first run of its shapes in this process (a GPU worker's)."""
        return needs_preparing(self.target.model, shape_key(self.target, self.proposer, self.prompt_ids,
                                                            self.request.settings, self.runs, self.options))

    def prepare(self, bound: float | None = None) -> Preparation:
        """The run's warm-up (prepare), no capture starting past `bound` seconds; where it stopped, the run
        goes on without graphs, with a proposer made for that."""
        self.preparation = prepare(self.target, self.proposer, self.prompt_ids, self.request.settings, bound,
                                   self.runs, self.options)
        if self.preparation.eager:
            self.options = self.preparation.options_for_run(self.options)
            self.proposer = make_proposer(self.request.method, self.target, self.draft, options=self.options)
        return self.preparation


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
        self._pool = POOL
        self._held = POOL.hold(request.target, request.draft)  # its models stay loaded until it ends
        try:
            if setup is None:  # made and prepared here, as long as that takes (a GPU of its own)
                setup = RunSetup.make(request, target, draft)
                setup.prepare()
            prompt_ids, options = setup.prompt_ids, setup.options
            self.speculative = SteppedRun(SpeculativeRun(target, setup.proposer, prompt_ids, request.settings,
                                                         request.prompt, options=options))
            self.plain = (SteppedRun(SpeculativeRun(target, PlainProposer(), prompt_ids, request.settings,
                                                    request.prompt, options=options)) if request.compare_plain else None)
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
        return speedup_doubt(speedup, tau, self.plain.durations, spec.durations, [s.gamma for s in spec.steps])

    def report(self):
        """specviz.api.Report of the finished run (None until the speculative run has a result)."""
        from ..api import Report

        if not self.speculative.done:
            return None
        return Report(self.speculative.result, self.plain.result if self.plain is not None and self.plain.done else None)


# -- a run computed in one GPU call, served here from its records -------------------------------------------

@dataclass
class RunHeader:
    """What a run computed elsewhere tells first: what the app's header and inspector need of its models."""
    tokenizer: object
    target_label: str
    device_label: str
    prompt_tokens: int
    speculative_settings: DecodeSettings
    plain_settings: DecodeSettings | None
    preparation: Preparation | None = None


def capture_bound() -> float | None:
    """The seconds a run may spend capturing graphs: bounded inside a ZeroGPU call (its GPU is lent for
    gpu.DURATION), not on a GPU of the app's own."""
    return CAPTURE_SECONDS if forks() else None


def run_records(request: RunRequest) -> Iterator[tuple]:
    """A whole run, computed where this generator runs (on ZeroGPU: a GPU worker, in one GPU call), as
    picklable records: ("preparing", fresh worker) where the run captures graphs first (the first run of its
    shapes on this worker), ("started", RunHeader), then ("step", which, StepRecord, idle before it) and
    ("result", which, RunResult, idle seconds) for which in "speculative", "plain", and last ("end", phase,
    error); or ("failed", message). Closing it stops the run at its next step."""
    try:
        target, draft = load_models(request)
        setup = RunSetup.make(request, target, draft)
        if setup.needs_preparing():
            yield ("preparing", this_worker().calls <= 1)
        setup.prepare(capture_bound())
        run = LiveRun(request, target, draft, setup)
    except Exception as error:
        if not isinstance(error, SpecvizError):
            log.exception("could not start a run")
        yield ("failed", message_of(error))
        return
    try:
        yield ("started", RunHeader(run.tokenizer, run.target_label, run.device_label, run.prompt_tokens,
                                    run.speculative.settings, run.plain.settings if run.plain else None,
                                    run.preparation))
        run.start()
        sent = {"speculative": 0, "plain": 0}
        reported = set()
        while True:
            running = run.active
            for which, stepped in (("speculative", run.speculative), ("plain", run.plain)):
                if stepped is None:
                    continue
                for index in range(sent[which], len(stepped.steps)):
                    yield ("step", which, stepped.steps[index], stepped.idle_before[index])
                sent[which] = len(stepped.steps)
                if stepped.done and which not in reported:
                    reported.add(which)
                    yield ("result", which, stepped.result, stepped.idle_seconds)
            if not running:
                break
            time.sleep(0.02)
        yield ("end", run.phase, run.error)
    finally:
        run.stop()


class RecordedRun:
    """A run computed in one GPU call (a forked process, run_records), received here record by record: what
    the app shows, replays, inspects or steps through is read from these records, never from the process that
    computed them (it is gone after the call). Stop ends the call at its next step."""

    def __init__(self, request: RunRequest, records: Iterator[tuple]):
        self.id = uuid.uuid4().hex[:12]
        self.request = request
        self.target = self.draft = None
        self.tokenizer = None
        self.target_label = request.target
        self.device_label = ""
        self.prompt_tokens = 0
        self.speculative = StepLog(request.method, request.settings)
        self.plain = StepLog("plain", request.settings) if request.compare_plain else None
        self.phase = READY
        self.error: str | None = None
        self.paused_ever = False
        self.version = 0
        self.trace_path: str | None = None
        self.started = threading.Event()  # set once the models are loaded and the run began (or it failed)
        self.preparing_since: float | None = None  # time.monotonic() when the worker began capturing graphs
        self.fresh_worker: bool | None = None  # whether that worker serves its first call
        self.preparation: Preparation | None = None  # what preparing did, once the run began
        self._records = records
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, name=f"specviz-recorded-{self.id}", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        try:
            for record in self._records:
                if self._stop.is_set():
                    break
                self._file(record)
            else:
                if not self.finished:
                    self.phase = STOPPED
        except Exception as error:  # the GPU call itself failed (spaces reports the class name only)
            log.exception("recorded run %s failed", self.id)
            self.error = message_of(error)
            self.phase = FAILED
        finally:
            self._records.close()
            if self._stop.is_set() and not self.finished:
                self.phase = STOPPED
            self.version += 1
            self.started.set()

    def _file(self, record: tuple) -> None:
        kind = record[0]
        if kind == "preparing":
            self.preparing_since, self.fresh_worker = time.monotonic(), record[1]
        elif kind == "started":
            header: RunHeader = record[1]
            self.tokenizer, self.target_label, self.device_label = header.tokenizer, header.target_label, header.device_label
            self.prompt_tokens = header.prompt_tokens
            self.speculative.settings = header.speculative_settings
            if self.plain is not None and header.plain_settings is not None:
                self.plain.settings = header.plain_settings
            self.preparation = header.preparation
            self.phase = RUNNING
            self.started.set()
        elif kind == "step":
            _, which, step, idle = record
            log_ = self.speculative if which == "speculative" else self.plain
            log_.steps.append(step)
            log_.idle_before.append(idle)
            if which == "plain":
                self.phase = BASELINE
        elif kind == "result":
            _, which, result, idle = record
            log_ = self.speculative if which == "speculative" else self.plain
            log_.result, log_.idle_seconds = result, idle
        elif kind == "end":
            _, phase, error = record
            self.phase, self.error = phase, error
        elif kind == "failed":
            self.phase, self.error = FAILED, record[1]
            self.started.set()
        self.version += 1

    # the controls of a LiveRun that a computed run has
    @property
    def active(self) -> bool:
        return self._thread.is_alive() and self.phase != READY

    @property
    def finished(self) -> bool:
        return self.phase in (DONE, STOPPED, FAILED)

    def start(self, max_steps: int | None = None) -> bool:
        return False  # it computes in one call, all the way: nothing to resume

    def pause(self) -> None:
        pass

    def stop(self) -> None:
        self._stop.set()

    def hold(self, seconds: float) -> None:
        pass  # it computes in another process, on a GPU: the page's drawing does not land on its steps

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    speedup = LiveRun.speedup
    doubt = LiveRun.doubt
    report = LiveRun.report


# -- form values to settings -------------------------------------------------------------------------------

def settings_from_form(max_new_tokens, gamma, temperature, top_p=1.0, seed=None, tree=0, draft_stop=0.0) -> DecodeSettings:
    """Widget values (sliders give floats, an empty number box None) to validated DecodeSettings, through the
    boundary's one reader (form.read_form)."""
    values = dict(max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature, top_p=top_p, seed=seed,
                  tree=tree, draft_stop=draft_stop)
    return read_form({k: (None if v == "" else v) for k, v in values.items()}, PROFILE).settings


def model_name(value) -> str | None:
    """A model field's value: None when empty (or 'none')."""
    text = str(value or "").strip()
    return None if text.lower() in ("", "none") else text


def drafter_for(method: str, target_name: str, draft_value) -> str | None:
    """The drafter a run loads: the one chosen, for the methods that take one; for `draft` on the default
    target with none chosen, the draft model distilled from it (shipped in assets/drafters)."""
    if method not in USES_DRAFT_MODEL:
        return None
    chosen = model_name(draft_value)
    if chosen is None and method == "draft" and target_name == DEFAULT_MODEL:
        return DISTILLED
    return chosen


# -- models shared by all sessions ------------------------------------------------------------------------

@dataclass
class Placement:
    """Where the app puts models, set once at launch (`python app.py --device-map auto ...`): a target too
    large for one GPU is sharded over this machine's GPUs with accelerate; the drafter sits on one device."""

    device_map: str | dict | None = None
    max_memory: str | dict | None = None
    draft_device: str | None = None


PLACEMENT = Placement()


def configure_placement(device_map=None, max_memory=None, draft_device=None) -> None:
    global PLACEMENT
    PLACEMENT = Placement(device_map or None, max_memory or None, draft_device or None)


# -- the public profile and the models it allows -------------------------------------------------------------

PROFILE = Profile()  # the local profile until the app is launched with another (configure_profile)
POOL = ModelPool(keep={DEFAULT_MODEL}, in_use=lambda: models_in_use())


def configure_profile(profile: Profile) -> None:
    """The profile the app serves with (set once at launch): its checks at the boundary, its memory budget."""
    global PROFILE, POOL
    PROFILE = profile
    POOL = ModelPool(profile.memory_budget, profile.dtype_bytes, keep={DEFAULT_MODEL}, in_use=lambda: models_in_use())


def machine_profile(env=None) -> Profile:
    """The profile for this process: public on a Space or with SPECVIZ_PUBLIC=1 (public.py), its memory budget
    from the memory of the device models load on (a GPU's, else the host's) and their dtype there."""
    device = pick_device(None)
    memory = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    return profile_from_env(env, device_memory=memory, dtype_bytes=pick_dtype(None, device).itemsize)


def load_target(name: str) -> LoadedModel:
    """A target from the process-wide registry, loaded on first use within the pool's budget."""
    return POOL.load(name, lambda: load_model(name, device_map=PLACEMENT.device_map, max_memory=PLACEMENT.max_memory))


def load_models(request: RunRequest) -> tuple[LoadedModel, LoadedModel | None]:
    """The target and drafter from the process-wide registry (loaded on first use). Models that no run uses
    are unloaded first to make room (model_pool.py), so that switching models does not pile them up in memory.
    The warm-up is the run's own (prepare): it knows the run's draft length, tree and proposer."""
    with POOL.using(request.target, request.draft):
        target = load_target(request.target)
        draft = (POOL.load(request.draft, lambda: load_draft_model(request.draft, target,
                                                                   PLACEMENT.draft_device or str(target.device)))
                 if request.draft else None)
    return target, draft


def encode_prompt(target: LoadedModel, prompt: str) -> list[int]:
    """A prompt's token ids, refused when the profile takes fewer tokens (its characters were checked at the
    boundary; tokens are known only once the target's tokenizer has read them)."""
    ids = encode(target, prompt)
    check_prompt_tokens(len(ids), PROFILE)
    return ids


def shape_key(target: LoadedModel, proposer, prompt_ids: list[int], settings: DecodeSettings, runs: int,
              options: EngineOptions) -> tuple:
    """What the graphs a run replays depend on besides the target: its proposer (and the models it drafts
    with), draft length, tree, attention span, greedy or sampled, how many runs at once, the engine's options."""
    drafters = tuple(id(getattr(runner, "model", None)) for runner in proposer.runners())
    return (proposer.name, drafters, settings.gamma, settings.tree, graph_span(prepared_length(target, prompt_ids,
            settings), target.context_length), settings.greedy, runs, options)


def prepared_length(target: LoadedModel, prompt_ids: list[int], settings: DecodeSettings) -> int:
    return min(len(prompt_ids) + settings.max_new_tokens + settings.tree + 1, target.context_length)


def prepare(target: LoadedModel, proposer, prompt_ids: list[int], settings: DecodeSettings,
            bound: float | None = None, runs: int = 1, options: EngineOptions | None = None) -> Preparation:
    """A run's one warm-up, untimed: a first short run of the model, and on a GPU the graphs this run will
    replay (its draft length, tree and proposer; for `runs` runs at once), captured before anything is timed,
    no capture starting past `bound` seconds (None: no bound). What it did: gpu_worker.Preparation (where it
    stopped, the run goes on with Preparation.options_for_run)."""
    options = options or EngineOptions.from_environment()
    length = prepared_length(target, prompt_ids, settings)
    key = shape_key(target, proposer, prompt_ids, settings, runs, options)
    with ENGINE_LOCK:
        return prepare_in_worker(target.model, key, lambda: warm_up(
            target, settings.gamma + 1, length, [proposer], tree=settings.tree, device_loop=settings.greedy,
            detail=True, options=options, runs=runs), bound)


# -- sessions ----------------------------------------------------------------------------------------------

@dataclass
class Session:
    run: "LiveRun | RecordedRun | None" = None
    cursor: int | None = None  # the step shown highlighted (step mode, replay); None: follow the run
    replaying: bool = False
    narrow: bool = False  # the page is narrower than a phone's (app.NARROW_WIDTH): charts stacked
    # the stop signals of the session's handlers now running (weak: a finished handler's goes by itself)
    cancels: weakref.WeakSet = field(default_factory=weakref.WeakSet)

    def watch(self) -> Cancel:
        """A stop signal for a handler starting now: set by this session's Stop, or by gradio dropping the event."""
        cancel = Cancel.for_this_event(PROFILE.run_seconds)
        self.cancels.add(cancel)
        return cancel

    def stop_all(self) -> None:
        """Stop: every handler of the session ends its work at its next step."""
        for cancel in list(self.cancels):
            cancel.set()


MAX_SESSIONS = 256
# what the sessions' finished runs may hold in all: a step's records take 2.5 to 6.5 KB in memory (a plain step,
# a tree's), so a run of 512 tokens and its baseline some 8 MB; part of the reserve the models' budget leaves
SESSION_MEMORY = 512 * 2 ** 20
STEP_BYTES = 8 * 2 ** 10
_sessions: OrderedDict[str, Session] = OrderedDict()
_sessions_lock = threading.Lock()
_sessions_pid = os.getpid()  # the process that serves the sessions: a GPU worker forked from it holds a stale copy
_widths: OrderedDict[str, bool] = OrderedDict()  # a page's layout, told before its first run made its session


def held_bytes(state: Session) -> int:
    """What a session's run holds in memory (its steps' records), about."""
    run = state.run
    if run is None:
        return 0
    return STEP_BYTES * (len(run.speculative.steps) + (len(run.plain.steps) if run.plain is not None else 0))


IDLE, PAUSED_RUN, BUSY = 0, 1, 2  # what a session is doing, in the order sessions go (BUSY ones never)


def standing(state: Session) -> int:
    """BUSY: its run is going or a handler of it is running; PAUSED_RUN: its run waits in step mode (it holds
    its caches); IDLE: nothing in progress."""
    run = state.run
    if (run is not None and run.active) or len(state.cancels) > 0:
        return BUSY
    return PAUSED_RUN if run is not None and not run.finished else IDLE


def sessions_to_drop(held: list[tuple[int, int]], most: int, memory: int) -> list[int]:
    """Which sessions go, given (standing, bytes) of each from the least to the most recently used: idle ones
    first, then those paused in step mode, each kind least recently used first, until at most `most` remain and
    they hold at most `memory` bytes. A BUSY session never goes: a run in progress is someone's (and runs in
    progress are bounded by the queue's admission)."""
    count, total = len(held), sum(size for _, size in held)
    dropped = []
    for kind in (IDLE, PAUSED_RUN):
        for index, (standing_, size) in enumerate(held):
            if count <= most and total <= memory:
                return dropped
            if standing_ != kind:
                continue
            dropped.append(index)
            count -= 1
            total -= size
    return dropped


def session(key: str) -> Session:
    """The state of one browser tab or API client (gradio's session hash), made on its first engine request;
    past MAX_SESSIONS or SESSION_MEMORY, the least recently used idle sessions go (sessions_to_drop)."""
    with _sessions_lock:
        state = _sessions.get(key)
        if state is None:
            state = _sessions[key] = Session(narrow=_widths.pop(key, False))
        _sessions.move_to_end(key)
        keys = list(_sessions)
        # the session asked for stays, as busy: its request is starting now
        drop = sessions_to_drop([(BUSY if k == key else standing(_sessions[k]), held_bytes(_sessions[k]))
                                 for k in keys], MAX_SESSIONS, SESSION_MEMORY)
        evicted = [_sessions.pop(keys[i]) for i in drop]
    for old in evicted:
        if old.run is not None:
            old.run.stop()
    return state


def find_session(key: str) -> Session | None:
    """A session that exists (None otherwise): what a call with nothing to start (Stop, Pause, Replay, the step
    slider) acts on. Such a call makes no session, so that it can push no one's out."""
    with _sessions_lock:
        state = _sessions.get(key)
        if state is not None:
            _sessions.move_to_end(key)
        return state


def remember_width(key: str, narrow: bool) -> None:
    """A page's layout (told once as it loads): kept on its session, or until its first run makes one."""
    state = find_session(key)
    if state is not None:
        state.narrow = narrow
        return
    with _sessions_lock:
        _widths[key] = narrow
        while len(_widths) > 4 * MAX_SESSIONS:
            _widths.popitem(last=False)


def live_runs() -> list:
    """The runs the sessions hold now (a measurement that drives the app from outside finds its own here)."""
    with _sessions_lock:
        return [state.run for state in _sessions.values() if state.run is not None]


def session_key(request) -> str:
    """A gradio request's session hash (API calls without one share "anonymous")."""
    return getattr(request, "session_hash", None) or "anonymous"


def session_of(request) -> Session:
    return session(session_key(request))


def existing_session_of(request) -> Session:
    """The request's session if it has one, else an empty one that is not kept (nothing to act on)."""
    return find_session(session_key(request)) or Session()


def end_session(key: str) -> None:
    with _sessions_lock:
        state = _sessions.pop(key, None)
    if state is not None and state.run is not None:
        state.run.stop()


def models_in_use() -> set[str]:
    """The models the sessions' unfinished runs use. None in a GPU worker: its copy of the sessions is the
    app's at the fork, whose runs it does not hold (a run there holds its models itself, POOL.hold); taken for
    its own, a worker kept for many calls would never unload them."""
    if os.getpid() != _sessions_pid:
        return set()
    with _sessions_lock:
        runs = [s.run for s in _sessions.values() if s.run is not None and not s.run.finished]
    names = set()
    for run in runs:
        names.add(run.request.target)
        if run.request.draft:
            names.add(run.request.draft)
    return names
