"""The distilled draft model's greedy chain on a GPU, two ways side by side in one process: read back a token at
a time (what a CPU does, where a read is free) and queued on the device with one read a step
(ModelDrafter.chain_on_device), each beside plain decoding on the same prompts.

    source scripts/gpu_common.sh && python3 scripts/gpu_draft_chain.py --per-category 2 --out "$OUT"

Writes $OUT/draft_chain.json: per way the pooled tok/s, the speedup over plain, tau, alpha and the drafting and
verifying time a step, and whether every output equalled plain's.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specviz import DecodeSettings, load_model  # noqa: E402
from specviz.api import encode, make_proposer, run_once, warm_up  # noqa: E402
from specviz.bench import load_prompts  # noqa: E402
from specviz.proposers import PlainProposer  # noqa: E402
from specviz.proposers.checkpoints import load_draft_model  # noqa: E402


def pooled(results: list, plain: list) -> dict:
    tokens = sum(r.metrics.new_tokens for r in results)
    seconds = sum(r.metrics.wall_seconds for r in results)
    steps = sum(r.metrics.target_forwards for r in results)
    drafted = sum(r.metrics.drafted for r in results)
    plain_tps = sum(r.metrics.new_tokens for r in plain) / sum(r.metrics.wall_seconds for r in plain)
    return {"tokens_per_second": tokens / seconds, "speedup": tokens / seconds / plain_tps,
            "tau": tokens / steps, "alpha": sum(r.metrics.accepted for r in results) / drafted if drafted else None,
            "draft_ms_per_step": 1e3 * sum(r.metrics.draft_seconds for r in results) / steps,
            "verify_ms_per_step": 1e3 * sum(r.metrics.verify_seconds for r in results) / steps,
            "identical": sum(r.token_ids == p.token_ids for r, p in zip(results, plain)), "prompts": len(results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default=str(ROOT / "data" / "spec_bench" / "question.jsonl"))
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--stops", default="0,0.5", help="draft stops to run, comma-separated")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", default="runs")
    args = parser.parse_args()

    target = load_model("default", device="cuda", dtype=args.dtype)
    draft = load_draft_model("distilled", target)
    prompts = load_prompts(args.prompts, per_category=args.per_category)
    encoded = [encode(target, p["prompt"]) for p in prompts]
    base = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    ways = [(f"draft:{args.gamma}@{stop} {'queued' if queued else 'read a token'}",
             dataclasses.replace(base, draft_stop=float(stop)), queued)
            for stop in args.stops.split(",") for queued in (False, True)]

    def proposer(queued: bool):
        made = make_proposer("draft", target, draft)
        made.chain_on_device = queued
        return made

    length = max(len(ids) for ids in encoded) + args.max_new_tokens + args.gamma + 1
    warm_up(target, args.gamma + 1, length, [proposer(True)], device_loop=True)
    run_once(target, PlainProposer(), encoded[0], base, detail=False)
    for _, settings, queued in ways:  # one untimed run each: first calls
        run_once(target, proposer(queued), encoded[0], settings, detail=False)

    plain, results = [], {name: [] for name, _, _ in ways}
    for prompt, ids in zip(prompts, encoded):
        plain.append(run_once(target, PlainProposer(), ids, base, prompt["prompt"], detail=False))
        for name, settings, queued in ways:
            results[name].append(run_once(target, proposer(queued), ids, settings, prompt["prompt"], detail=False))
    report = {"device": str(target.device), "dtype": args.dtype, "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "plain": pooled(plain, plain),
              "ways": {name: pooled(runs, plain) for name, runs in results.items()}}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "draft_chain.json").write_text(json.dumps(report, indent=1))
    print(f"plain {report['plain']['tokens_per_second']:.1f} tok/s over {len(prompts)} prompts")
    for name, figures in report["ways"].items():
        print(f"{name:28s} {figures['tokens_per_second']:8.1f} tok/s {figures['speedup']:.2f}x tau {figures['tau']:.2f} "
              f"alpha {figures['alpha']:.2f} draft {figures['draft_ms_per_step']:.2f} ms verify "
              f"{figures['verify_ms_per_step']:.2f} ms identical {figures['identical']}/{len(prompts)}")


if __name__ == "__main__":
    main()
