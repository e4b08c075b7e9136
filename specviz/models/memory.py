"""Whether a model fits the memory free now, asked before anything of it loads: a model too large for the machine
is refused with a message, never left for the kernel's out-of-memory killer to end the process in the middle of
a load (an 8B model in float32 on a 23 GiB machine did that to the local app at 20.5 GB resident).

What is free: SPECVIZ_MEMORY_AVAILABLE when set (a size such as 12GiB; tests and owners state it), else the GPU's
free memory where models go to a GPU, else the host's available memory (psutil, or /proc/meminfo's MemAvailable).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import SpecvizError

ENV = "SPECVIZ_MEMORY_AVAILABLE"
GiB = 1 << 30
HEADROOM = 256 << 20  # what a load needs beside the weights it keeps (buffers, a tokenizer, Python's own)


class NotEnoughMemoryError(SpecvizError):
    """A model whose weights do not fit the memory free now; nothing of it was loaded."""


def parse_bytes(text: str) -> int:
    """A memory size as written in the environment: '12GiB', '12 GB', '800MiB', '1500000000' -> bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?)B?\s*", str(text), re.IGNORECASE)
    if not match:
        raise SpecvizError(f"'{text}' is not a size such as 12GiB or 800MB")
    number, unit, binary = float(match.group(1)), match.group(2).upper(), bool(match.group(3))
    power = "KMGT".index(unit) + 1 if unit else 0
    return int(number * (1024 if binary else 1000) ** power)


def parse_size(text: str) -> int:
    """SPECVIZ_MEMORY_AVAILABLE's size in bytes (parse_bytes), its name in the refusal."""
    try:
        return parse_bytes(text)
    except SpecvizError as error:
        raise SpecvizError(f"{ENV}: {error}") from None


def _meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_bytes(on_gpu: bool = False) -> tuple[int | None, str]:
    """(bytes free for a model now, where the figure comes from); None when nothing says."""
    override = os.environ.get(ENV, "").strip()
    if override:
        return parse_size(override), ENV
    if on_gpu:
        import torch

        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info()
            return int(free), "free on the GPU"
    try:
        import psutil

        return int(psutil.virtual_memory().available), "available on this machine"
    except ImportError:
        free = _meminfo_available()
        return free, "available on this machine"


def memory_refusal(name: str, need: int | None, dtype: str, free: int | None, source: str,
                   freed: int = 0) -> str | None:
    """Why `name` must not load, or None: its weights (at the dtype it will run in) and the load's headroom do not
    fit what is free plus what unloading other models frees (freed). None where either figure is unknown."""
    if need is None or free is None or need + HEADROOM <= free + freed:
        return None
    also = f" ({(free + freed) / GiB:.1f} GiB once the models it replaces are unloaded)" if freed else ""
    return (f"{name} needs about {need / GiB:.1f} GiB in {dtype} and {free / GiB:.1f} GiB is {source}{also}: "
            "it was not loaded, so that loading it cannot end the server; choose a smaller model"
            + (" (a random shape takes fewer layers, such as random:llama-8b,layers=4)" if name.startswith("random:")
               else ""))
