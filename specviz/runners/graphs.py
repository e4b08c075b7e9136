"""CUDA graphs and compile for the fast path: the workspaces (a static KV cache and the graphs captured over it)
pooled per model, capturing a graph, the attention spans graphs are made for, and layer functions compiled once
per process. Whether graphs and compile are used at all is options.EngineOptions's to say."""
from __future__ import annotations

import contextlib
import threading
import time
import weakref

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..rule.tree import WORD

MIN_SPAN = 128  # smallest attention span captured in a graph (positions are padded up to a power of two)


# Eager forwards (prefills, any length) avoid cuDNN's attention: it builds a plan for every new shape, which in
# bfloat16 costs more than the forward, so each new prompt length paid for plans. Captured graphs keep it: their
# shapes are fixed, and in decode it is the fastest (docs/fast-path.md).
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def no_cudnn_attention():
    return sdpa_kernel(ATTENTION_BACKENDS)


def next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class CapturedGraph:
    """One captured forward: static inputs (token ids, first position; a tree's depths and visibility),
    static outputs. The inputs are views of one tensor, filled by one copy from the host."""

    def __init__(self, count: int, device: torch.device, tree: bool = False):
        words = count * -(-count // WORD)  # the visibility's rows packed in 64-bit words (tree.visibility_words)
        size = count + 1 + (count + words if tree else 0)
        self.inputs = torch.zeros(size, dtype=torch.long, device=device)
        self.ids, self.start = self.inputs[:count], self.inputs[count:count + 1]
        self.depths = self.inputs[count + 1:2 * count + 1] if tree else None
        self.visible = self.inputs[2 * count + 1:] if tree else None
        self.graph = torch.cuda.CUDAGraph()
        self.logits: torch.Tensor | None = None
        self.hidden: torch.Tensor | None = None


class Workspace:
    """What a runner needs beyond the weights and keeps between runs: the KV cache, the RoPE tables and the
    captured graphs (which point at both). Runners borrow one from a pool per model (take_workspace), so
    that graphs are captured once per model and shape, not once per run."""

    def __init__(self, device: torch.device, dtype: torch.dtype):
        self.device, self.dtype = device, dtype
        self.capacity = 0
        self.keys_values = self.keys = self.values = self.cos = self.sin = None  # keys, values: views of the first
        self.graphs: dict[tuple, CapturedGraph] = {}  # (positions, span, tree) -> graph
        self.users: dict[tuple, object] = {}  # what the runner's users capture over this cache (the device
        # loop's state and graphs), under their own keys; dropped with the graphs when the cache is replaced
        self.pool = None  # the CUDA graphs' shared memory pool


_workspaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # first decoder layer -> {key: [free]}


_workspaces_lock = threading.Lock()


def take_workspace(first_layer: torch.nn.Module, key: tuple, device, dtype) -> Workspace:
    with _workspaces_lock:
        free = _workspaces.setdefault(first_layer, {}).setdefault(key, [])
        return free.pop() if free else Workspace(device, dtype)


def return_workspace(first_layer_ref, key: tuple, workspace: Workspace) -> None:
    first_layer = first_layer_ref()
    if first_layer is None:
        return
    with _workspaces_lock:
        _workspaces.setdefault(first_layer, {}).setdefault(key, []).append(workspace)


class CaptureDeadline(BaseException):
    """A capture that would start past the deadline its thread was given (capture_deadline). A BaseException, so
    that it passes through the engine's handlers that take any failure while capturing for a failed compile
    (or an unavailable device loop) and go on without it: the caller that set the deadline decides."""


_deadline = threading.local()  # .at: time.monotonic() past which no capture starts in this thread (None: none)
_captured = 0  # graphs this process has captured


@contextlib.contextmanager
def capture_deadline(seconds: float | None):
    """No capture starts in this thread more than `seconds` from now (None: no bound), so that preparing a run
    stops between graphs: one capture, and a compile inside it, cannot be cut short."""
    previous = getattr(_deadline, "at", None)
    _deadline.at = None if seconds is None else time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline.at = previous


def check_capture_deadline() -> None:
    """Raise CaptureDeadline where this thread's deadline has passed."""
    at = getattr(_deadline, "at", None)
    if at is not None and time.monotonic() >= at:
        raise CaptureDeadline("the time for capturing CUDA graphs ran out")


def graphs_captured() -> int:
    """CUDA graphs this process has captured so far (a worker's figure: compared before and after preparing)."""
    return _captured


def capture_graph(graph: torch.cuda.CUDAGraph, run, device: torch.device, owner, generators=()):
    """Run `run` twice on a side stream (lazy initialisation and allocations happen outside the capture; its
    writes must be idempotent), then capture it into `graph`, in the memory pool that the graphs of `owner`
    (a workspace: `.pool`, None until its first capture) share. generators: CUDA generators `run` draws from
    besides the default one (each replay then draws from their state at that time). Returns what the captured
    call returned: the graph's static outputs. Past the thread's deadline (capture_deadline) it raises
    CaptureDeadline before doing anything."""
    global _captured
    check_capture_deadline()
    for generator in generators:
        graph.register_generator_state(generator)
    if owner.pool is None:
        owner.pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            run()
    torch.cuda.current_stream(device).wait_stream(stream)
    with torch.cuda.graph(graph, pool=owner.pool):
        outputs = run()
    _captured += 1
    return outputs


def graph_span(end: int, context_length: int) -> int:
    """The attention span a graph covers for a sequence of `end` tokens: a power of two >= MIN_SPAN (or
    the whole context), so that few graphs serve every length."""
    return min(context_length, max(MIN_SPAN, next_power_of_two(end)))


_compiled: dict = {}


def compiled_fn(fn):
    """`fn` (a layer function) through torch.compile, compiled once per process: every layer of every model
    calls the same function with its own tensors, so it compiles twice per dtype: for K = 1 and for K > 1
    (sizes dynamic). Duck sizing is off while it compiles: otherwise a K that happens to equal a head count
    or the head size (3, 9, 64 for the default model) gets a specialised graph of its own, tens of seconds
    each."""
    if fn not in _compiled:
        compiled = torch.compile(fn, dynamic=True, fullgraph=True)

        def call(*args):
            with _no_duck_shapes():
                return compiled(*args)

        _compiled[fn] = call
    return _compiled[fn]


_compiled_static: dict = {}


def compiled_static(fn):
    """`fn` (a device-loop step function) through torch.compile with static shapes, once per process: each
    run's shapes are fixed by its settings, and the kernels fused are what a captured graph replays."""
    if fn not in _compiled_static:
        _allow_recompiles(STATIC_RECOMPILES)
        _compiled_static[fn] = torch.compile(fn, dynamic=False)
    return _compiled_static[fn]


# A static function compiles once per shape it meets: per draft length, attention span and sampling's arguments,
# which one sampled bench of two draft lengths takes past dynamo's default of 8. Past its limit dynamo runs the
# function eagerly without a word (dflash's sampled drafting went from 0.17 to 0.41 ms a step so).
STATIC_RECOMPILES = 64


def _allow_recompiles(most: int) -> None:
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # its older name
    setattr(config, name, max(getattr(config, name), most))


def _no_duck_shapes():
    import contextlib

    try:
        from torch.fx.experimental import _config
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(_config, "use_duck_shape"):  # another torch release: correct, only more compiles
        return contextlib.nullcontext()
    return _config.patch(use_duck_shape=False)
