"""The energy a GPU used, for joules per generated token: a faster run is not always a cheaper one.

Where the driver reports it, NVML's total energy counter (pynvml, from the nvidia-ml-py package: installed
apart, imported only here and only when energy is asked for); else `nvidia-smi`'s power draw, sampled in a
thread and added up over time; on a CPU nothing (power is not measured there). torch.cuda.power_draw reads the
same NVML sensor through pynvml, so it is no fallback where pynvml is missing. A meter reads the energy used so
far, in joules, by every GPU the run uses; a run's energy is the difference of two readings around it."""
from __future__ import annotations

import shutil
import subprocess
import threading
import time

NOT_MEASURED_CPU = "power is not measured on a CPU"


class NvmlMeter:
    """NVML's total energy consumption counter (millijoules since the driver loaded; Volta and newer)."""

    source = "NVML total energy consumption"

    def __init__(self, pynvml, indices: list[int]):
        self.pynvml = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.read()  # a GPU without the counter fails here, not in the middle of a bench

    def read(self) -> float:
        return sum(self.pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles) / 1e3

    def close(self) -> None:
        pass


class PowerIntegral:
    """Energy from power samples: each sample's watts held until the next sample (or until now)."""

    def __init__(self):
        self.joules = 0.0
        self.last: tuple[float, float] | None = None  # (seconds, watts) of the latest sample
        self.lock = threading.Lock()

    def add(self, seconds: float, watts: float) -> None:
        with self.lock:
            if self.last is not None:
                self.joules += self.last[1] * max(0.0, seconds - self.last[0])
            self.last = (seconds, watts)

    def at(self, seconds: float) -> float:
        """Joules from the first sample up to `seconds`."""
        with self.lock:
            if self.last is None:
                return 0.0
            return self.joules + self.last[1] * max(0.0, seconds - self.last[0])


def parse_power_line(line: str) -> float | None:
    """The watts of one line of `nvidia-smi --query-gpu=power.draw --format=csv,noheader,nounits` (one GPU's
    figure, or several joined by commas when no GPU was named); None for a line with no figure ('[N/A]')."""
    try:
        return sum(float(part) for part in line.split(","))
    except ValueError:
        return None


class SmiMeter:
    """`nvidia-smi` sampling the power draw every `interval_ms`, in a thread that integrates it."""

    source = "nvidia-smi power.draw sampled every 100 ms"

    def __init__(self, indices: list[int], interval_ms: int = 100):
        self.integrals = {i: PowerIntegral() for i in indices}
        self.process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=index,power.draw", "--format=csv,noheader,nounits", "-lms", str(interval_ms),
             "-i", ",".join(map(str, indices))], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 5
        while any(i.last is None for i in self.integrals.values()):  # the first sample of each GPU
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("nvidia-smi gave no power draw")
            time.sleep(0.02)

    def _follow(self) -> None:
        for line in self.process.stdout:
            index, _, power = line.partition(",")
            watts = parse_power_line(power)
            if watts is not None and index.strip().isdigit() and int(index) in self.integrals:
                self.integrals[int(index)].add(time.monotonic(), watts)

    def read(self) -> float:
        now = time.monotonic()
        return sum(i.at(now) for i in self.integrals.values())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=5)


def gpu_indices(devices: list[str]) -> list[int]:
    """The CUDA device indices among device names ('cuda:1', 'cuda', '0', 'cpu', ...): the GPUs a run uses."""
    import torch

    found = set()
    for name in map(str, devices):
        if name.isdigit():  # a device map's placement: a CUDA index
            found.add(int(name))
        elif name.startswith("cuda"):
            index = name.partition(":")[2]
            found.add(int(index) if index else torch.cuda.current_device())
    return sorted(found)


def energy_meter(devices: list[str]):
    """(a meter or None, what it measures or why nothing is measured) for the GPUs among `devices`. NVML device
    indices follow CUDA's where CUDA_VISIBLE_DEVICES is unset; the bench records the meter's source."""
    indices = gpu_indices(devices)
    if not indices:
        return None, NOT_MEASURED_CPU
    reasons = []
    try:
        import pynvml  # nvidia-ml-py: optional, so imported only when energy is asked for

        pynvml.nvmlInit()
        return NvmlMeter(pynvml, indices), NvmlMeter.source
    except Exception as error:  # not installed, no driver, or a GPU without the energy counter
        reasons.append(f"NVML: {error or type(error).__name__}")
    if shutil.which("nvidia-smi"):
        try:
            return SmiMeter(indices), SmiMeter.source
        except Exception as error:
            reasons.append(f"nvidia-smi: {error}")
    else:
        reasons.append("nvidia-smi: not found")
    return None, "power is not measured here (" + "; ".join(reasons) + ")"


def energy_lines(summary: dict, source: str, measured: bool) -> str:
    """The bench's energy, under its table: each method's joules per generated token and its ratio to plain's,
    or why nothing was measured."""
    if not measured:
        return f"energy: not measured ({source})"
    plain = summary.get("plain", {}).get("overall", {}).get("joules_per_token")
    parts = []
    for method, block in summary.items():
        figure = block["overall"].get("joules_per_token")
        if figure is not None:
            ratio = f" ({figure / plain:.2f}x plain's)" if plain and method != "plain" else ""
            parts.append(f"{method} {figure:.3f} J/token{ratio}")
    return f"energy ({source}, every GPU the run uses, idle draw included): " + ", ".join(parts)
