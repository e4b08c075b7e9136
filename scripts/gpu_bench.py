"""The GPU benchmark of docs/benchmarks (2026-11-26), in one process (the model loads and compiles once), stage by stage;
each stage writes its JSON as soon as it ends, so a run stopped at its time limit keeps what it finished.

  A  bfloat16, all Spec-Bench prompts: specviz plain and ngram; transformers generate() plain and with
     prompt lookup on a stated subset (it runs ~25 tok/s: all 480 prompts would take most of an hour)
  B  bfloat16, one prompt per category: adaptive beside plain and ngram
  C  float32, two prompts per category: plain, ngram and adaptive, for the exact-identity check
  D  forward time against positions (the cost curve), the copy bandwidth and the bandwidth floor
  E  bfloat16, one prompt per category: early-exit (gamma 4) beside plain

Run from the repository's root:  python3 -m scripts.gpu_bench --out DIR
"""
from __future__ import annotations

import argparse
import json
import os
import time
import traceback

import torch

from scripts.gpu_check import copy_bandwidth  # the same measurement as the check's
from specviz.measure.bench import run_bench
from specviz.runners.static import cost_curve, make_runner
from specviz.models.loading import load_model
from specviz.settings import DecodeSettings


def weight_bytes(model) -> int:
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--prompts", default="data/spec_bench/question.jsonl")
    parser.add_argument("--gamma", type=int, default=16)
    parser.add_argument("--budget", type=float, default=560, help="seconds; a stage that would end past it is skipped")
    parser.add_argument("--hf-limit", type=int, default=4)
    parser.add_argument("--stages", default="A,D,B,C,E")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this script")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    began = time.perf_counter()
    common = dict(prompts_file=args.prompts, target="default", device=args.device, chat=True)
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    estimates = {"A": 0, "D": 10, "B": 40, "C": 100, "E": 45}  # seconds a stage needs, to decide whether it fits

    def stage_A():
        run_bench(methods=["plain", "ngram"], settings=settings, out=f"{args.out}/A_bf16_all.json", dtype="bfloat16",
                  transformers=["hf-generate", "hf-prompt-lookup"], transformers_per_category=1,
                  transformers_limit=args.hf_limit, **common)

    def stage_B():
        run_bench(methods=["plain", "ngram", "adaptive"], settings=settings, out=f"{args.out}/B_bf16_methods.json",
                  dtype="bfloat16", per_category=1, **common)

    def stage_C():
        run_bench(methods=["plain", "ngram", "adaptive"], settings=settings, out=f"{args.out}/C_fp32_identity.json",
                  dtype="float32", per_category=2, **common)

    def stage_E():  # early-exit drafts with the model's own first layers: a short gamma, as it rarely hits
        run_bench(methods=["plain", "early-exit"], settings=DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=4),
                  out=f"{args.out}/E_bf16_early_exit.json", dtype="bfloat16", per_category=1, **common)

    def stage_D():
        target = load_model("default", device=args.device, dtype="bfloat16" if args.device == "cuda" else "float32")
        bandwidth = copy_bandwidth() if args.device == "cuda" else float("nan")
        runner = make_runner(target.model)
        curve = cost_curve(target.model, [1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 24, 33], context=300, repeats=30,
                           runner=runner)
        runner.release()
        floor_ms = weight_bytes(target.model) / bandwidth * 1e3
        report = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "copy_bandwidth_GBps": bandwidth / 1e9,
                  "weight_bytes": weight_bytes(target.model), "floor_ms": floor_ms, "forward_ms": curve,
                  "runner": type(runner).__name__, "compiled": getattr(runner, "use_compile", None)}
        with open(f"{args.out}/D_cost_curve.json", "w") as f:
            json.dump(report, f, indent=1)
        print(f"copy {bandwidth / 1e9:.0f} GB/s; floor {floor_ms:.3f} ms/forward; forward ms by K: "
              + ", ".join(f"{k}: {v:.3f}" for k, v in curve.items()), flush=True)

    stages = {"A": stage_A, "B": stage_B, "C": stage_C, "D": stage_D, "E": stage_E}
    for name in args.stages.split(","):
        elapsed = time.perf_counter() - began
        if elapsed + estimates[name] > args.budget:
            print(f"== stage {name} skipped: {elapsed:.0f} s used of {args.budget:.0f}", flush=True)
            continue
        print(f"== stage {name} at {elapsed:.0f} s", flush=True)
        try:
            stages[name]()
        except Exception:  # keep going: the other stages' figures still count
            traceback.print_exc()
    print(f"== done at {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
