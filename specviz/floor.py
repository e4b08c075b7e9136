"""The weight-read floor: a decode step reads every weight of the target at least once, so at batch 1 it cannot
take less than the weights' bytes over the device's memory bandwidth. The bench prints plain decoding's time a
token against it: how close the fast path comes to what the memory allows."""
from __future__ import annotations

import torch

# peak memory bandwidth from the vendors' spec sheets, bytes a second, by the name torch reports
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


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters (shared ones once): what one decode step reads at least once."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def spec_bandwidth(device: torch.device) -> float | None:
    """The device's peak memory bandwidth from its spec sheet; None where it is not known (CPUs, other cards)."""
    if device.type != "cuda":
        return None
    return SPEC_BANDWIDTH.get(torch.cuda.get_device_name(device))


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
