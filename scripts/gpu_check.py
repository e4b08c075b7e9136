"""GPU check and forward timings for the fast path (one call on the GPU machine: `python -m scripts.gpu_suite check`).

1. The two ceilings: device-to-device copy bandwidth, and the physical floor of one forward
   (every weight byte read once) for the default model.
2. Correctness: the static-cache forward against transformers' forward (bf16 and float32), graph replay
   against the eager static forward, compiled against eager.
3. Forward time against positions K (the cost curve) for: transformers eager (CausalRunner), static eager,
   static + CUDA graphs, static + CUDA graphs + torch.compile.
Writes JSON to --out and prints a table."""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from specviz.runners.static import StaticRunner, cost_curve
from specviz.models.loading import load_model
from specviz.runners.causal import CausalRunner


def copy_bandwidth(gigabytes: float = 1.0) -> float:
    """Bytes read + written per second by a large device-to-device copy (median of 10)."""
    n = int(gigabytes * 2**30 // 4)
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * n * 4 / statistics.median(times[2:])


def weight_bytes(model) -> int:
    """Bytes a forward must read: every parameter once (a tied embedding/output matrix counts once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * p.element_size()
    return total


def compare(a: StaticRunner | CausalRunner, b, ids: torch.Tensor, steps) -> dict:
    """Feed the same forwards to two runners: max |logit difference| and argmax agreement."""
    a.reset(), b.reset()
    worst, agree, total = 0.0, 0, 0
    for start, count in steps:
        la, _ = a.forward(ids[start:start + count])
        lb, _ = b.forward(ids[start:start + count])
        worst = max(worst, (la - lb).abs().max().item())
        agree += (la.argmax(-1) == lb.argmax(-1)).sum().item()
        total += count
    return {"max_abs_logit_diff": worst, "argmax_agreement": agree / total}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--positions", default="1,2,3,4,5,6,8,10,12,16,17,24,33")
    parser.add_argument("--context", type=int, default=300)
    args = parser.parse_args(argv)
    positions = [int(k) for k in args.positions.split(",")]
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    import transformers
    report["transformers"] = transformers.__version__

    report["copy_bandwidth_GBps"] = copy_bandwidth() / 1e9
    print(f"copy bandwidth {report['copy_bandwidth_GBps']:.0f} GB/s (read + write)", flush=True)

    ids = torch.randint(0, 49152, (400,), generator=torch.Generator().manual_seed(0))
    steps = [(0, 200), (200, 1), (201, 5), (206, 1), (207, 9), (216, 1)]
    for dtype in ("float32", "bfloat16"):
        target = load_model("default", device="cuda", dtype=dtype)
        model = target.model
        block = report.setdefault(dtype, {})
        block["weight_bytes"] = weight_bytes(model)
        block["floor_ms"] = block["weight_bytes"] / (report["copy_bandwidth_GBps"] * 1e9) * 1e3
        eager = StaticRunner(model, graphs=False, compile=False)
        block["static_vs_transformers"] = compare(eager, CausalRunner(model), ids, steps)
        graphs = StaticRunner(model, graphs=True, compile=False)
        block["graphs_vs_eager"] = compare(graphs, eager, ids, steps)
        begin = time.perf_counter()
        compiled = StaticRunner(model, graphs=True, compile=True)
        compiled.forward(ids[:200], logits_for="last")
        compiled.forward(ids[200:201])
        compiled.forward(ids[201:206])
        block["compile_seconds"] = time.perf_counter() - begin
        block["compiled_vs_eager"] = compare(compiled, eager, ids, steps)
        print(dtype, json.dumps({k: v for k, v in block.items() if k != "curves"}), flush=True)
        curves = block.setdefault("curves_ms", {})
        curves["transformers-eager"] = cost_curve(model, positions, args.context, repeats=5, runner=CausalRunner(model))
        curves["static-eager"] = cost_curve(model, positions, args.context, repeats=5, runner=eager)
        curves["static-graphs"] = cost_curve(model, positions, args.context, repeats=20, runner=graphs)
        curves["static-graphs-compiled"] = cost_curve(model, positions, args.context, repeats=20, runner=compiled)
        print(f"{dtype}: forward ms by positions K (context {args.context}); floor {block['floor_ms']:.3f} ms")
        print(f"{'K':>4}" + "".join(f"{name:>24}" for name in curves))
        for k in positions:
            print(f"{k:>4}" + "".join(f"{curves[name][k]:>24.3f}" for name in curves), flush=True)
        for runner in (eager, graphs, compiled):
            runner.release()
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
