"""The engine's switches, in one object. Every switch is on by default; the environment turns one off (or forces
one on), and this module is the only place that reads those variables (docs/fast-path.md's table):

    SPECVIZ_FAST=0              transformers' forward (runner.CausalRunner) instead of the fast path (StaticRunner)
    SPECVIZ_GRAPHS=0            no CUDA graphs (eager kernels on a GPU)
    SPECVIZ_COMPILE=0           no torch.compile on a GPU
    SPECVIZ_ONEDNN=0            no oneDNN prepacked matrices on a CPU in float32
    SPECVIZ_TRITON_ATTENTION=0  no Triton attention kernel in captured graphs (PyTorch's attention instead)
    SPECVIZ_DEVICE_LOOP=0       never the device loop; force: also without graphs (eagerly, as the CPU tests run it)
    SPECVIZ_DETAIL_STREAM=0     the app's step detail on the verify pass's own stream, not a second one
    SPECVIZ_EXACT=0             no exact mode: the target's verify pass may round differently from plain decoding

ZeroGPU changes none of them: a GPU worker captures graphs (compiled) on its first call and keeps them while it
lives (gpu_worker.py; docs/deploy.md has what that costs a fresh worker and gains every call after).

Whatever makes a run, a runner or a drafter (SpeculativeRun, make_runner, StaticRunner, BatchedRunner,
make_proposer, api.warm_up) takes `options`; given none, it reads them here once, and passes them down to what
it makes (a run's runner and device loop get the run's)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEVICE_LOOP_MODES = ("1", "0", "force")


@dataclass(frozen=True)
class EngineOptions:
    fast: bool = True  # the fast path (runners/static.py) where the model is supported
    graphs: bool = True  # CUDA graphs on a GPU
    compile: bool = True  # torch.compile'd layers in those graphs
    onednn: bool = True  # oneDNN prepacked matrices on a CPU in float32
    triton_attention: bool = True  # gpu_attention.py's kernel in captured graphs
    device_loop: str = "1"  # "1": where the fast path has graphs; "0": never; "force": also eagerly
    detail_stream: bool = True  # the device loop computes the app's step detail on a second CUDA stream
    exact: bool = True  # the target's forward in the exact mode on a GPU (runners/exact.py, docs/exactness.md)

    def __post_init__(self):
        if self.device_loop not in DEVICE_LOOP_MODES:
            raise ValueError(f"device_loop is one of {', '.join(DEVICE_LOOP_MODES)}, got {self.device_loop!r}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "EngineOptions":
        """The switches as the environment sets them (os.environ unless another mapping is given)."""
        env = os.environ if environ is None else environ

        def on(name: str) -> bool:
            return env.get(name, "1") != "0"

        mode = env.get("SPECVIZ_DEVICE_LOOP", "1")
        return cls(fast=on("SPECVIZ_FAST"), graphs=on("SPECVIZ_GRAPHS"), compile=on("SPECVIZ_COMPILE"),
                   onednn=on("SPECVIZ_ONEDNN"),
                   triton_attention=on("SPECVIZ_TRITON_ATTENTION"),
                   device_loop=mode if mode in DEVICE_LOOP_MODES else "1", detail_stream=on("SPECVIZ_DETAIL_STREAM"),
                   exact=on("SPECVIZ_EXACT"))


def set_for_this_process(exact: bool | None = None, environ: dict | None = None) -> None:
    """Set a switch for every run this process makes from now on (the command line's --exact), where each of them
    reads it: the environment (None leaves a switch as it is)."""
    env = os.environ if environ is None else environ
    if exact is not None:
        env["SPECVIZ_EXACT"] = "1" if exact else "0"
