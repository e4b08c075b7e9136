"""GPU calls. On a ZeroGPU Space, `spaces.GPU` runs the function it wraps in a forked process that holds a GPU for
the call: what that process loads, starts or sets is gone when the call ends, and the parent's sessions, threads
and locks are copies there. So the app wraps only its computations with gpu(): module-level generator functions
of picklable arguments that yield picklable records (steps, rows, lessons) and raise nothing (a failure is a
record too: spaces turns an exception into its class name). Everything after a call (step mode, replay, inspect,
stop) is served in the parent from the records it received; a Stop closes the generator, which spaces passes on
to the forked process at its next record (spaces/zero/wrappers.py, generator_function_wrapper).

Elsewhere gpu() leaves a function as it is. SPECVIZ_FORK_GPU=1 runs each call in a forked process the way spaces
does (arguments and records pickled, a stop event, exceptions reduced to their class name), so that the ZeroGPU
path is tried on any machine (tests/test_ui_fork.py)."""
from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import threading
import traceback
from collections import Counter

DURATION = 120  # seconds a ZeroGPU call may hold its GPU (a whole run with its plain baseline)


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


def gpu(fn):
    """fn as a GPU call: forked on ZeroGPU (and with SPECVIZ_FORK_GPU=1), as it is elsewhere. Decided at each call,
    so that a test can switch it."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        _count("started", 1)
        ended = "stopped"
        try:
            spaces = _zero_gpu()
            if spaces is not None:  # pragma: no cover
                yield from spaces.GPU(duration=DURATION)(fn)(*args, **kwargs)
            elif os.environ.get("SPECVIZ_FORK_GPU") == "1":
                yield from forked(fn)(*args, **kwargs)
            else:
                yield from fn(*args, **kwargs)
            ended = "finished"
        except Exception:
            ended = "failed"
            raise
        finally:  # a close() (the caller stopped) lands here with its computation already ended
            _count(ended, -1)

    return call


class WorkerError(RuntimeError):
    """An exception inside a forked call, known in the parent by its class name only (as spaces reports it)."""


_END = "end"


def _child(fn, args_reader, results, stop) -> None:
    """In the forked process: run the generator, send each record pickled, stop when the parent asks."""
    try:
        args, kwargs = pickle.loads(args_reader.recv_bytes())
        records = fn(*args, **kwargs)
        for record in records:
            if stop.is_set():
                records.close()
                break
            results.send_bytes(pickle.dumps(("ok", record)))
        results.send_bytes(pickle.dumps((_END, None)))
    except BaseException as error:  # reported as spaces does: the class name, the traceback in the log
        traceback.print_exc()
        try:
            results.send_bytes(pickle.dumps(("error", type(error).__name__)))
        except Exception:
            pass
    finally:
        os._exit(0)  # no atexit work of the parent (gradio's, torch's) in the child


def forked(fn):
    """fn run as spaces.GPU runs it on ZeroGPU: in a process forked for the call, its arguments and records
    pickled, a stop event set when the caller closes the generator."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        context = multiprocessing.get_context("fork")
        args_reader, args_writer = context.Pipe(duplex=False)
        results_reader, results_writer = context.Pipe(duplex=False)
        stop = context.Event()
        payload = pickle.dumps((args, kwargs))  # fails here, in the parent, for what spaces could not send either
        process = context.Process(target=_child, args=(fn, args_reader, results_writer, stop), daemon=True)
        process.start()
        results_writer.close()
        args_writer.send_bytes(payload)
        try:
            while True:
                try:
                    kind, value = pickle.loads(results_reader.recv_bytes())
                except EOFError:
                    raise WorkerError("GPU task aborted") from None
                if kind == _END:
                    return
                if kind == "error":
                    raise WorkerError(value)
                yield value
        finally:  # a caller that stops early: the child ends at its next record, as spaces' stop event makes it
            stop.set()
            results_reader.close()  # a child blocked on a full pipe gets a broken pipe and ends too
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(5)

    return call
