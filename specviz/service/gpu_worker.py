"""What a GPU worker has prepared, and preparing a run there within a bound.

On ZeroGPU (`spaces` 0.51, spaces/zero/wrappers.py) a GPU call runs in a worker process forked from the app's
process; the worker is kept after the call and serves the next one on the same GPU while that GPU stays idle,
else a new worker is forked. What a worker loads and captures (models, CUDA graphs, compiled kernels) lives as
long as it does. So a run prepares (api.warm_up) what no earlier call on this worker prepared, and a new worker
prepares again.

The state is this process's, known by its pid: a forked child inherits its parent's copy (the app's process,
which never had a GPU, or a test's), and that copy is never taken for what the child prepared.

Preparing is bounded: no capture starts past `bound` seconds (runners.graphs.capture_deadline), and a capture
that fails ends preparing too; the run then goes on without graphs (eagerly) and its Preparation says why. The
graphs captured before the bound stay, for the next call to finish. A single capture, and a torch.compile inside
it, is not cut short: with compile off (ZeroGPU's default, options.py) each capture is short."""
from __future__ import annotations

import dataclasses
import os
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ..errors import SpecvizError
from ..options import EngineOptions
from ..runners.graphs import CaptureDeadline, capture_deadline, graphs_captured

DURATION = 120  # seconds a ZeroGPU call may hold its GPU (the app's: a whole run with its plain baseline)
CAPTURE_SECONDS = DURATION / 4  # the most a call spends capturing CUDA graphs before its run goes on without
# them: the rest of DURATION is the run's (a fresh worker's first call also loads the models)


@dataclass(frozen=True)
class Preparation:
    """What preparing one run did, in the process that did it (picklable: the worker sends it with the run)."""

    pid: int
    call: int  # this worker's GPU calls so far, this one included: 1 on a fresh worker
    needed: bool  # the first run of these shapes on this worker, so it prepared them
    seconds: float  # spent preparing (outside the run's timing)
    graphs: int  # CUDA graphs captured while preparing (0 on a CPU, and once a worker has them)
    eager: str | None = None  # why the run goes on without CUDA graphs; None: it has them (or never uses them)

    @property
    def fresh_worker(self) -> bool:
        return self.call <= 1

    def sentence(self) -> str:
        """What the page says of it after the run ("" where there is nothing to say)."""
        if self.eager:
            return f"ran without CUDA graphs (slower): {self.eager}"
        if self.needed and self.graphs:
            where = "first run on this GPU worker" if self.fresh_worker else "first such run on this GPU worker"
            return f"GPU prepared in {self.seconds:.1f} s ({self.graphs} CUDA graphs, {where}; not in the timings)"
        return ""

    def options_for_run(self, options: EngineOptions) -> EngineOptions:
        """The options the run goes on with: without graphs (and without compile, which would compile in the
        run's time) where preparing stopped."""
        return dataclasses.replace(options, graphs=False, compile=False) if self.eager else options


class WorkerState:
    """One process's GPU calls and what it prepared for each model (weakly: a model unloaded takes its entries)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.calls = 0
        self.prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {shape key}
        self.preparations: list[Preparation] = []

    def has_prepared(self, model, key: Hashable) -> bool:
        return key in self.prepared.get(model, ())


_state: WorkerState | None = None


def this_worker() -> WorkerState:
    """This process's state: a fresh one in a process that differs from the one the state was made in (a fork)."""
    global _state
    if _state is None or _state.pid != os.getpid():
        _state = WorkerState(os.getpid())
    return _state


def begin_call() -> int:
    """A GPU call starts in this process; returns its number here (1: the worker's first)."""
    state = this_worker()
    state.calls += 1
    return state.calls


def needs_preparing(model, key: Hashable) -> bool:
    """Whether a run of these shapes (key: whatever its graphs depend on besides the model) is the first on
    this worker, so that preparing it captures graphs (what the page says while it does)."""
    return not this_worker().has_prepared(model, key)


def prepare(model, key: Hashable, warm: Callable[[], None], bound: float | None = None) -> Preparation:
    """warm() (api.warm_up for the run) with no capture starting past `bound` seconds (None: no bound); what it
    did. A capture that fails or a bound reached ends it, and the Preparation says why the run goes on eagerly
    (a SpecvizError, the run's own mistake, is raised); only a preparation that ended is remembered, so the next
    call goes on from the graphs captured so far."""
    state = this_worker()
    needed = not state.has_prepared(model, key)
    before, started = graphs_captured(), time.perf_counter()
    eager = None
    try:
        with capture_deadline(bound):
            warm()
        state.prepared.setdefault(model, set()).add(key)
    except CaptureDeadline:
        eager = f"capturing CUDA graphs did not end within {bound:.0f} s; the next run on this worker goes on with it"
    except SpecvizError:  # the run's own mistake (its settings), not the GPU's: the run says so as it would
        raise
    except Exception as error:  # graphs are an optimisation: the run goes on without them
        eager = f"preparing the GPU failed ({type(error).__name__}: {str(error)[:200]})"
    preparation = Preparation(state.pid, state.calls, needed, time.perf_counter() - started,
                              graphs_captured() - before, eager)
    state.preparations.append(preparation)
    return preparation
