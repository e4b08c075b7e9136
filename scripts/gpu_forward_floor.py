"""What speculation could reach with no host work at all: the fast path's forward timed on the
GPU alone, for one position (a plain step), a chain of K and a draft tree of N nodes. Forwards are queued back
to back with no read-back in between, so the host runs ahead and the time a forward takes is the GPU's own.
With a method's tau from a bench run, tau * t(1) / t(K) is the speedup that method would reach if drafting and
every other host step cost nothing.

With --target random:llama-8b (random weights of a stated shape, random_target.py) it measures a real size
without downloading one; --positions times chains of K against one position, beside the weight-read floor.

    SPECVIZ_DEFAULT_GGUF=... python3 -m scripts.gpu_forward_floor [--context 300]
        [--taus chain17=2.87,tree16=3.08,tree64=3.59]
    python3 -m scripts.gpu_forward_floor --target random:llama-8b --positions 2,4,8,16 --taus ''"""
from __future__ import annotations

import argparse
import time

import torch

from specviz.runners.static import StaticRunner
from specviz.measure.floor import spec_bandwidth, weight_bytes
from specviz.models.loading import load_model


def gpu_ms(runner: StaticRunner, feed, length: int, repeats: int = 300) -> float:
    for _ in range(5):  # capture and warm
        feed()
        runner.rollback(length)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        feed()
        runner.rollback(length)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--taus", default="chain17=2.87,tree16=3.08,tree64=3.59")
    parser.add_argument("--target", default="default")
    parser.add_argument("--positions", default="", help="chains of K positions to time against one, e.g. 2,4,8,16")
    args = parser.parse_args(argv)
    target = load_model(args.target, device="cuda", dtype=torch.bfloat16)
    runner = StaticRunner(target.model)
    vocab = target.vocab_size
    runner.reset()
    runner.forward(torch.randint(0, vocab, (args.context,)))
    length = runner.length
    print(torch.cuda.get_device_name(), "torch", torch.__version__, f"{args.target}, context {length}")
    size, bandwidth = weight_bytes(target.model), spec_bandwidth(target.device)
    floor_ms = size / bandwidth * 1e3 if bandwidth else None
    if floor_ms:
        print(f"weight-read floor: {size / 1e9:.2f} GB / {bandwidth / 1e12:.2f} TB/s = {floor_ms:.3f} ms a forward")
    taus = [t for t in args.taus.split(",") if t]
    chains = [f"chain{k}" for k in args.positions.split(",") if k]
    times = {}
    for label in ["chain1", *chains, *[t.split("=")[0] for t in taus]]:
        size = int(label.removeprefix("chain").removeprefix("tree"))
        ids = torch.randint(0, vocab, (size,)).tolist()
        if label.startswith("tree"):  # a binary tree: node i's parent is (i - 1) // 2
            parents = [-1] + [(i - 1) // 2 for i in range(1, size - 1)]
            feed = lambda ids=ids, parents=parents: runner.forward(ids, parents=parents)
        else:
            tensor = torch.tensor(ids)
            feed = lambda tensor=tensor: runner.forward(tensor)
        times[label] = gpu_ms(runner, feed, length, repeats=300 if size < 1e9 else 50)
        against = f"; {times[label] / times['chain1']:.3f}x one position" if label != "chain1" else ""
        floor = f"; {times[label] / floor_ms:.2f}x the floor" if floor_ms else ""
        print(f"{label:8s} {times[label]:.3f} ms a forward, GPU-bound{against}{floor}")
    for item in taus:
        label, tau = item.split("=")
        bound = float(tau) * times["chain1"] / times[label]
        print(f"{label}: tau {tau} x t(1) / t = {bound:.2f}x plain with no host work at all")


if __name__ == "__main__":
    main()
