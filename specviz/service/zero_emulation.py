"""ZeroGPU's GPU calls, emulated on any machine: what `spaces.GPU` does to a generator function in `spaces` 0.51
(spaces/zero/wrappers.py, generator_function_wrapper), without its scheduler.

- A call runs in a worker process forked from this one; its arguments go there pickled (a PicklingError is
  raised here, before the call), and each record it yields comes back pickled.
- Each call runs in a fresh thread of the worker; an exception there reaches the caller as WorkerError carrying
  only the exception's class name (spaces prints the traceback in the worker's log), and the worker is not used
  again.
- Closing the caller's generator sets the worker's stop event: the computation is closed at its next record,
  and the caller waits for the worker to end the call.
- After a call ends (or is stopped) the worker is kept, and the next call of the same function reuses it while
  its GPU stays idle (spaces: `workers[nvidia_index] = worker` after the end, reused when the scheduler
  answers `idle`); otherwise a new worker is forked. Workers are per wrapped function, as in spaces.

Here there is one GPU; `retire()` stands for the scheduler lending it elsewhere meanwhile (the next call gets a
new worker). A worker whose process died, or whose call failed, is replaced too (spaces leaves a failed one to
the GPU's release; this ends it).

A forked worker can use CUDA only if this process has not: spaces refuses to start after CUDA was initialised,
and so does this (torch.cuda.is_available() initialises the driver too: call nothing of torch.cuda here before
the calls you emulate)."""
from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import traceback

_END, _OK, _ERROR = "end", "ok", "error"
_QUIT = b""  # the parent ends an idle worker (a pipe's end is no signal: later workers inherit its descriptor)
STOP_WAIT = 60.0  # seconds a stopped call may take to reach its next record before its worker is ended


class WorkerError(RuntimeError):
    """An exception inside a GPU call, known here by its class name only (as spaces reports it)."""


def _serve(task, requests, results, stop) -> None:
    """The worker's loop: a call at a time, each in a fresh thread, until the parent closes the request pipe."""
    while True:
        try:
            payload = requests.recv_bytes()
        except (EOFError, OSError):
            break
        if payload == _QUIT:
            break
        stop.clear()

        def iterate():
            try:
                args, kwargs = pickle.loads(payload)
                records = task(*args, **kwargs)
                for record in records:
                    if stop.is_set():
                        records.close()
                        break
                    results.send_bytes(pickle.dumps((_OK, record)))
            except BaseException as error:  # reported as spaces does: the class name; the traceback in the log
                traceback.print_exc()
                results.send_bytes(pickle.dumps((_ERROR, type(error).__name__)))

        thread = threading.Thread(target=iterate, name="specviz-gpu-call")
        thread.start()
        thread.join()
        results.send_bytes(pickle.dumps((_END, None)))
    os._exit(0)  # no atexit work of the parent (gradio's, torch's) in the worker


class Worker:
    """A forked process serving one function's calls."""

    def __init__(self, task):
        _check_no_cuda()
        context = multiprocessing.get_context("fork")
        requests_reader, self._requests = context.Pipe(duplex=False)
        self._results, results_writer = context.Pipe(duplex=False)
        self.stop = context.Event()
        self.process = context.Process(target=_serve, args=(task, requests_reader, results_writer, self.stop),
                                       daemon=True, name="specviz-gpu-worker")
        self.process.start()
        requests_reader.close()
        results_writer.close()
        self.calls = 0  # calls sent to it

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def send(self, payload: bytes) -> None:
        self.calls += 1
        self._requests.send_bytes(payload)

    def receive(self, timeout: float | None = None):
        """The next (kind, value) of the call; None when nothing came within `timeout`. EOFError: it died."""
        if timeout is not None and not self._results.poll(timeout):
            return None
        return pickle.loads(self._results.recv_bytes())

    def close(self) -> None:
        """End the worker: an idle one ends its loop; one still in a call (or stuck) is killed."""
        try:
            self._requests.send_bytes(_QUIT)
        except OSError:
            pass
        self._requests.close()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._results.close()


def _check_no_cuda() -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in this process before a GPU worker was forked: a forked worker "
                           "could not use the GPU. Emulate the GPU calls first, then use CUDA here")


class GpuFunction:
    """`task` (a generator function) as spaces.GPU wraps it on ZeroGPU, one GPU: call it as the function."""

    def __init__(self, task):
        self.task = task
        self._idle: Worker | None = None  # the worker kept after its last call (spaces' workers[nvidia_index])
        self._lock = threading.Lock()
        self.forked = 0  # workers started
        self.last_pid: int | None = None  # the worker of the latest call

    def retire(self) -> None:
        """The GPU was lent elsewhere meanwhile: the idle worker ends, and the next call forks a new one."""
        with self._lock:
            worker, self._idle = self._idle, None
        if worker is not None:
            worker.close()

    def _take(self) -> Worker:
        with self._lock:
            worker, self._idle = self._idle, None
        if worker is not None and worker.alive:
            return worker
        if worker is not None:
            worker.close()
        self.forked += 1
        return Worker(self.task)

    def _keep(self, worker: Worker) -> None:
        with self._lock:
            extra = self._idle
            self._idle = worker
        if extra is not None:  # a call that ran beside this one had its own worker (another GPU, on ZeroGPU)
            extra.close()

    def __call__(self, *args, **kwargs):
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        payload = pickle.dumps((args, kwargs))  # fails here, as spaces' arg_queue.put does, for what cannot go
        worker = self._take()
        self.last_pid = worker.pid
        worker.send(payload)
        outcome = "stopped"  # until the call's end or failure is read
        try:
            while True:
                try:
                    kind, value = worker.receive()
                except (EOFError, OSError):
                    outcome = "failed"
                    raise WorkerError("GPU task aborted") from None
                if kind == _END:
                    outcome = "ended"
                    return
                if kind == _ERROR:
                    outcome = "failed"
                    raise WorkerError(value)
                yield value
        finally:
            if outcome == "stopped" and self._finish_stopped(worker):
                outcome = "ended"
            if outcome == "ended":
                self._keep(worker)
            else:
                worker.close()

    @staticmethod
    def _finish_stopped(worker: Worker) -> bool:
        """A caller that stopped early: the worker ends the call at its next record (its stop event), and what
        it sends meanwhile is dropped; True once it has ended the call (then it serves the next one)."""
        worker.stop.set()
        while True:
            try:
                message = worker.receive(STOP_WAIT)
            except (EOFError, OSError):
                return False
            if message is None:
                return False
            if message[0] == _END:
                return True
            if message[0] == _ERROR:
                return False


_functions: dict = {}
_functions_lock = threading.Lock()


def gpu_function(task) -> GpuFunction:
    """The one GpuFunction of `task` in this process (spaces caches its wrappers by function the same way, so
    that a function's workers outlive any one call)."""
    with _functions_lock:
        if task not in _functions:
            _functions[task] = GpuFunction(task)
        return _functions[task]


def retire_all() -> None:
    """Every function's idle worker ends (the next calls fork new ones)."""
    with _functions_lock:
        functions = list(_functions.values())
    for function in functions:
        function.retire()

