"""Forward time against batch size and positions: what a verify pass of K positions for each of B sequences
costs against a plain step of the same batch (K = 1), through the batched runner (runners/batched.py). At batch 1
a forward is bound by reading the weights, so K positions cost about one; as B x K grows the products turn
compute-bound and extra positions cost nearly in proportion: where speculation stops paying.

    python3 -m scripts.gpu_batch_cost --target random:llama-8b --batch-sizes 1,4,16,64 --positions 1,2,4,8
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from specviz.models import load_model
from specviz.runners.batched import BatchedRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="random:llama-8b")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    parser.add_argument("--positions", default="1,2,4,8")
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    target = load_model(args.target, device="cuda", dtype=torch.bfloat16)
    positions = [int(k) for k in args.positions.split(",")]
    print(torch.cuda.get_device_name(), "torch", torch.__version__, args.target, f"context {args.context}")
    rows = []
    for size in (int(b) for b in args.batch_sizes.split(",")):
        runner = BatchedRunner(target.model, size, args.context + max(positions) + 1)
        times = {}
        for k in positions:
            ids = torch.randint(0, 1000, (size, k), device="cuda")
            samples = []
            for repeat in range(args.repeats + 2):  # two untimed: first calls
                runner.rollback(torch.full((size,), args.context))
                torch.cuda.synchronize()
                start = time.perf_counter()
                runner.forward(ids)
                torch.cuda.synchronize()
                if repeat >= 2:
                    samples.append((time.perf_counter() - start) * 1e3)
            times[k] = sorted(samples)[len(samples) // 2]
            rows.append({"batch_size": size, "positions": k, "ms": times[k], "over_one": times[k] / times[positions[0]]})
        print(f"batch {size:3d}: " + "  ".join(f"K={k} {times[k]:7.2f} ms ({times[k] / times[positions[0]]:.2f}x)"
                                            for k in positions))
        del runner
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as file:
            json.dump({"target": args.target, "device": torch.cuda.get_device_name(), "context": args.context,
                       "rows": rows}, file, indent=1)


if __name__ == "__main__":
    main()
