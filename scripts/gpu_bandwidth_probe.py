"""How close a GPU's memory lets a decode step come to the spec-sheet floor: the read bandwidth a plain reduction
reaches, and the time of a decode step's matrix products alone (one token, bfloat16, every layer's weights
distinct, replayed from a CUDA graph) at a stated shape, each against the spec sheet's bandwidth.

    python3 -m scripts.gpu_bandwidth_probe [--shapes llama-1.7b,llama-8b]
"""
import argparse

import torch

from specviz.floor import spec_bandwidth
from specviz.random_target import SHAPES


def capture(fn, inner: int = 1) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `inner` calls of fn, after three calls on a side stream (lazy set-up, allocations)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    return graph


def graph_ms(fn, inner: int = 10, replays: int = 50) -> float:
    """Milliseconds for one call of fn, from a CUDA graph of `inner` calls replayed `replays` times."""
    graph = capture(fn, inner)
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (inner * replays)


@torch.compile(dynamic=False)
def REDUCTION(v, w):
    """A matrix-vector product as Inductor writes it from an elementwise product and a sum (a Triton reduction
    kernel that streams w once), instead of a cuBLAS call."""
    return (w.float() * v.float()).sum(-1).to(w.dtype)


def matrices(shape: dict) -> list[tuple[int, int]]:
    """(in, out) of every matrix product of one decode step: per layer q, k, v, o, gate, up, down; then the
    output layer."""
    h, i, heads, kv = shape["hidden"], shape["intermediate"], shape["heads"], shape["kv_heads"]
    kv_width = h // heads * kv
    layer = [(h, h), (h, kv_width), (h, kv_width), (h, h), (h, i), (h, i), (i, h)]
    return layer * shape["layers"] + [(h, shape["vocab"])]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="llama-1.7b,llama-8b")
    args = parser.parse_args()
    device = torch.device("cuda")
    bandwidth = spec_bandwidth(device)
    print(f"{torch.cuda.get_device_name(device)}: spec sheet {bandwidth / 1e12:.2f} TB/s")
    big = torch.ones(4 * 2**30 // 2, dtype=torch.bfloat16, device=device)  # 4 GiB, far past the L2 cache
    total = torch.empty((), dtype=torch.float32, device=device)
    ms = graph_ms(lambda: total.copy_(big.sum(dtype=torch.float32)), inner=2, replays=20)
    print(f"read (sum of 4 GiB): {big.numel() * 2 / ms / 1e9:.2f} TB/s = {big.numel() * 2 / ms / 1e9 / (bandwidth / 1e12):.3f} of the spec sheet")
    big = None  # freed before the shapes' weights are made
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        x = torch.randn(1, shape["hidden"], dtype=torch.bfloat16, device=device)
        weights = [torch.randn(o, i, dtype=torch.bfloat16, device=device) * 0.01 for i, o in matrices(shape)]
        wide = torch.randn(1, shape["intermediate"], dtype=torch.bfloat16, device=device)
        inputs = [wide if i == shape["intermediate"] else x for i, _ in matrices(shape)]

        size = sum(w.numel() * 2 for w in weights)
        floor_ms = size / bandwidth * 1e3
        for way, product in (("cuBLAS (F.linear)", torch.nn.functional.linear), ("compiled reduction", REDUCTION)):
            def step():
                for w, v in zip(weights, inputs):
                    product(v, w)

            ms = graph_ms(step, inner=2, replays=20)
            print(f"{name}, {way}: {len(weights)} matrix products, {size / 1e9:.2f} GB; alone {ms:.3f} ms a step "
                  f"against a floor of {floor_ms:.3f} ms ({ms / floor_ms:.2f}x; {size / ms / 1e9:.2f} TB/s)")
        weights = inputs = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
