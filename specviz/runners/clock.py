"""One clock for every timing that includes work queued on a device: the host's clock, read once the device
has finished what it was given (a CUDA call returns before its kernels end)."""
from __future__ import annotations

import time

import torch


def device_clock(device: torch.device) -> float:
    """time.perf_counter() after the device has done its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
