"""The weight-read floor: a decode step reads every weight of the target at least once, so at batch 1 it cannot
take less than the weights' bytes over the device's memory bandwidth. The bench prints plain decoding's time a
token against it: how close the fast path comes to what the memory allows."""
from __future__ import annotations

import torch

# peak memory bandwidth from the vendors' spec sheets, bytes a second, by the name torch reports; a card not
# named here by the family its name contains (FAMILY_BANDWIDTH)
SPEC_BANDWIDTH = {
    "NVIDIA H100 80GB HBM3": 3.35e12,  # H100 SXM
    "NVIDIA H100 PCIe": 2.0e12,
    "NVIDIA H100 NVL": 3.9e12,
    "NVIDIA H200": 4.8e12,
    "NVIDIA A100-SXM4-80GB": 2.039e12,
    "NVIDIA A100-SXM4-40GB": 1.555e12,
    "NVIDIA A100 80GB PCIe": 1.935e12,
    "NVIDIA L4": 0.3e12,
}
FAMILY_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.039e12, "L4": 0.3e12, "T4": 0.32e12, "A10G": 0.6e12}
CPU_BANDWIDTH = 20e9  # an assumption, not a measurement: a few DDR4/DDR5 channels as a small cloud VM sees them


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers, a tensor held twice once: what one decode step reads at
    least once."""
    sizes = {}
    for t in [*model.parameters(), *model.buffers()]:
        sizes.setdefault((t.data_ptr(), t.numel()), t.numel() * t.element_size())
    return sum(sizes.values())


def spec_bandwidth(device: torch.device) -> float | None:
    """The device's peak memory bandwidth from its spec sheet; None where it is not known (CPUs, other cards)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if name in SPEC_BANDWIDTH:
        return SPEC_BANDWIDTH[name]
    return next((value for family, value in FAMILY_BANDWIDTH.items() if family in name), None)


def memory_bandwidth(device: torch.device) -> tuple[float, str]:
    """(bytes a second, where the figure comes from): the spec sheet's for a known card, else an assumption that
    says it is one (a CPU's is not measured here)."""
    known = spec_bandwidth(device)
    if known is not None:
        return known, f"nominal for {torch.cuda.get_device_name(device)} (spec sheet)"
    if device.type == "cuda":
        return 1e12, f"assumed for {torch.cuda.get_device_name(device)} (not in the known list)"
    return CPU_BANDWIDTH, "assumed for a CPU (not measured)"


def weight_read_floor(model: torch.nn.Module, device: torch.device, plain: dict) -> dict:
    """The floor of one decode step, and plain decoding against it. plain: the bench's aggregate of plain
    runs (tokens_per_second: prefill included; verify_ms_per_step: one forward of one position)."""
    size, bandwidth = weight_bytes(model), spec_bandwidth(device)
    floor_ms = size / bandwidth * 1e3 if bandwidth else None
    plain_ms = 1e3 / plain["tokens_per_second"] if plain.get("tokens_per_second") else None
    step_ms = plain.get("verify_ms_per_step")
    return {"weight_bytes": size, "bandwidth_bytes_per_second": bandwidth, "floor_ms": floor_ms,
            "plain_ms_per_token": plain_ms, "plain_ms_per_step": step_ms,
            "plain_over_floor": plain_ms / floor_ms if floor_ms and plain_ms else None,
            "step_over_floor": step_ms / floor_ms if floor_ms and step_ms else None}


def describe_floor(floor: dict) -> str:
    size = f"{floor['weight_bytes'] / 1e9:.2f} GB of weights"
    if floor["floor_ms"] is None:
        return f"weight-read floor: {size}; this device's bandwidth is not known, so no floor"
    line = (f"weight-read floor: {size} / {floor['bandwidth_bytes_per_second'] / 1e12:.2f} TB/s (spec sheet) = "
            f"{floor['floor_ms']:.3f} ms a step")
    if floor["plain_ms_per_token"] is not None:
        line += (f"; plain decoding {floor['plain_ms_per_token']:.3f} ms a token ({floor['plain_over_floor']:.2f}x), "
                 f"its forward {floor['plain_ms_per_step']:.3f} ms a step ({floor['step_over_floor']:.2f}x)")
    return line
