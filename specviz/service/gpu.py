"""GPU calls. On a ZeroGPU Space, `spaces.GPU` runs the function it wraps in a worker process forked from the
app's, which holds a GPU for the call; the worker is kept and serves the next call while its GPU stays idle,
else a new one is forked (spaces 0.51, spaces/zero/wrappers.py). So what a call loads and captures may serve the
next calls, or be gone; and the parent's sessions, threads and locks are copies there. The app wraps only its
computations with gpu(): module-level generator functions of picklable arguments that yield picklable records
(steps, rows, lessons) and raise nothing (a failure is a record too: spaces turns an exception into its class
name). Everything after a call (step mode, replay, inspect, stop) is served in the parent from the records it
received; a Stop closes the generator, which spaces passes on to the worker at its next record.

Every computation goes through one wrapped function (in_worker), so that all of them share a worker per GPU,
and with it the models it loaded and the CUDA graphs it captured (gpu_worker.py: a run prepares what no earlier
call on its worker prepared, within CAPTURE_SECONDS).

Elsewhere gpu() leaves a function as it is. SPECVIZ_FORK_GPU=1 runs each call the way spaces does
(specviz/service/zero_emulation.py: a forked worker, reused while idle; arguments and records pickled, a stop event,
exceptions reduced to their class name), so that the ZeroGPU path is tried on any machine (tests/test_ui_fork.py)."""
from __future__ import annotations

import functools
import os
import threading
from collections import Counter

from . import gpu_worker, zero_emulation
from .gpu_worker import CAPTURE_SECONDS, DURATION  # the engine's, so that scripts without gradio share them
from .zero_emulation import WorkerError


def _zero_gpu():
    try:  # pragma: no cover - only on Hugging Face Spaces
        import spaces
        from spaces.config import Config
    except ImportError:
        return None
    return spaces if Config.zero_gpu else None


def forks() -> bool:
    """Whether GPU calls run in a forked process (ZeroGPU, or SPECVIZ_FORK_GPU=1)."""
    return _zero_gpu() is not None or os.environ.get("SPECVIZ_FORK_GPU") == "1"


_calls = Counter()  # GPU calls: "running" now, and how those over ended
_calls_lock = threading.Lock()


def calls() -> dict[str, int]:
    """How many GPU calls run now and how many finished or were stopped (closed by their caller before their
    end): what a test or a check reads to know that a cancelled request freed the engine."""
    with _calls_lock:
        return {key: _calls[key] for key in ("running", "finished", "stopped", "failed")}


def _count(key: str, running: int) -> None:
    with _calls_lock:
        _calls[key] += 1
        _calls["running"] += running


def in_worker(fn, *args, **kwargs):
    """Every GPU call, where it runs (a ZeroGPU worker): counted there (gpu_worker.begin_call), then fn."""
    gpu_worker.begin_call()
    yield from fn(*args, **kwargs)


def gpu(fn):
    """fn as a GPU call: in a worker on ZeroGPU (and with SPECVIZ_FORK_GPU=1), as it is elsewhere. Decided at
    each call, so that a test can switch it."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        _count("started", 1)
        ended = "stopped"
        try:
            spaces = _zero_gpu()
            if spaces is not None:  # pragma: no cover
                yield from spaces.GPU(duration=DURATION)(in_worker)(fn, *args, **kwargs)
            elif os.environ.get("SPECVIZ_FORK_GPU") == "1":
                yield from zero_emulation.gpu_function(in_worker)(fn, *args, **kwargs)
            else:
                yield from in_worker(fn, *args, **kwargs)
            ended = "finished"
        except Exception:
            ended = "failed"
            raise
        finally:  # a close() (the caller stopped) lands here with its computation already ended
            _count(ended, -1)

    return call


def retire_workers() -> None:
    """With SPECVIZ_FORK_GPU=1: the idle worker ends, as when ZeroGPU lends its GPU elsewhere; the next call
    forks a fresh one (which prepares again)."""
    zero_emulation.gpu_function(in_worker).retire()


def worker_pid() -> int | None:
    """With SPECVIZ_FORK_GPU=1: the process id of the worker of the latest call (None before any)."""
    return zero_emulation.gpu_function(in_worker).last_pid


__all__ = ["CAPTURE_SECONDS", "DURATION", "WorkerError", "calls", "forks", "gpu", "in_worker", "retire_workers",
           "worker_pid"]
