"""A run computed in one GPU call (on ZeroGPU: a forked GPU worker), served here from its records: run_records
computes it where it runs and yields picklable records; RecordedRun receives them and offers what the app reads
of a LiveRun (its step logs, phase and figures), never the process that computed them."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import SpecvizError
from ..settings import DecodeSettings
from .form import message_of
from .gpu_worker import Preparation, this_worker
from .live import BASELINE, DONE, FAILED, READY, RUNNING, STOPPED, LiveRun
from .run_request import RunRequest
from .run_setup import RunSetup, capture_bound, load_models
from .stepped_runs import StepLog

log = logging.getLogger(__name__)


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
            self.tokenizer, self.target_label, self.device_label = (
                header.tokenizer,
                header.target_label,
                header.device_label,
            )
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

