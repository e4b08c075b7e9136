"""Published drafter files at a real shape on the GPU: writes EAGLE-1 and Medusa-1 folders in the layouts of
yuhuili/EAGLE-Vicuna-7B-v1.3 and FasterDecoding/medusa-vicuna-7b-v1.3 (the 7B shape), or a DFlash folder in z-lab's
layout (--shape llama-8b --methods dflash: Llama 3.1 8B's), or an EAGLE-3 folder in SafeAILab's (--shape llama-8b
--methods eagle3: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's, which the eagle method loads), with random weights
(specviz/models/published_layouts.py), loads them through specviz's loader on the random target of the same shape
(random:vicuna-7b, random:llama-8b) and benches each against plain decoding through the fast path
(specviz.measure.bench, one run each per prompt). Random weights accept at random: what counts is that the files load
and what drafting costs. c = drafting time a step / the target's one-token forward (plain decoding's time a step); also
given over the method's own verify pass, and for EAGLE's chains a depth's share (drafting ms a step / gamma). Writes
OUT/published_drafters.json (and the two bench reports).

    python3 -m scripts.gpu_published_drafters --out $OUT                     # on the GPU machine
    python3 -m scripts.gpu_published_drafters --shape llama-8b --methods dflash --out $OUT
    python3 -m scripts.gpu_published_drafters --shape llama-8b --methods eagle3 --gamma 6 --out $OUT
    python3 -m scripts.gpu_published_drafters --shape tiny --device cpu --out DIR --max-new-tokens 12 --prompts 1
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from specviz.measure.bench import run_bench
from specviz.models.published_layouts import SHAPES, write_published
from specviz.settings import DecodeSettings


def write_prompts(path: Path, count: int, vocab: int, words: int, seed: int = 0) -> None:
    """Prompts of the word-level tokenizer's words w1..w{vocab-1} (random targets read no real text)."""
    rng = random.Random(seed)
    with open(path, "w") as handle:
        for i in range(count):
            text = " ".join(f"w{rng.randrange(1, vocab)}" for _ in range(words))
            handle.write(json.dumps({"question_id": i, "category": f"c{i}", "prompt": text}) + "\n")


def figures(report: dict, spec: str) -> dict:
    plain, method = report["summary"]["plain"]["overall"], report["summary"][spec]["overall"]
    forward = plain["verify_ms_per_step"]
    draft, verify = method["draft_ms_per_step"], method["verify_ms_per_step"]
    return {"tokens_per_second": method["tokens_per_second"], "speedup": method["speedup"],
            "mean_accepted_length": method["mean_accepted_length"], "acceptance_rate": method["acceptance_rate"],
            "identical_share": method["identical_share"], "draft_ms_per_step": draft, "verify_ms_per_step": verify,
            "c": draft / forward if draft is not None and forward else None,
            "c_over_verify": draft / verify if draft is not None and verify else None,
            "plain_tokens_per_second": plain["tokens_per_second"], "plain_forward_ms": forward}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="vicuna-7b", choices=sorted(SHAPES))
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--work", default=None, help="where the drafter folders go (default: a temporary folder)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on a GPU, float32 on a CPU")
    parser.add_argument("--methods", default="eagle,medusa", help="of eagle, eagle3, medusa, dflash (comma-separated; "
                        "eagle3 runs as the eagle method)")
    parser.add_argument("--gamma", type=int, default=5, help="chain length: EAGLE-1's depth, Medusa's 5 heads "
                        "(DFlash drafts its whole block: 15)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--prompt-words", type=int, default=64)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="published-drafters-"))
    shape = SHAPES[args.shape]
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")

    began = time.perf_counter()
    methods = [m for m in args.methods.split(",") if m]
    written = write_published(work, args.shape, methods)
    write_seconds = time.perf_counter() - began
    print(f"wrote {', '.join(f'{k} {v / 1e9:.3f} GB' for k, v in written['files'].items())} in {write_seconds:.0f} s",
          flush=True)
    prompts = work / "prompts.jsonl"
    write_prompts(prompts, args.prompts, shape.vocab, args.prompt_words)
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma, stop_at_eos=False)
    result = {"shape": args.shape, "target": shape.target, "dtype": dtype, "gamma": args.gamma,
              "max_new_tokens": args.max_new_tokens, "prompts": args.prompts, "files": written["files"],
              "write_seconds": write_seconds, "methods": {}}
    for method in methods:
        name = "eagle" if method == "eagle3" else method  # the eagle method loads both layouts
        spec = f"{name}:{15 if method == 'dflash' else args.gamma}"
        began = time.perf_counter()
        report = run_bench(str(prompts), ["plain", spec], settings, str(out / f"bench_{method}.json"),
                           target=shape.target, device=args.device, dtype=dtype, chat=False,
                           heads=str(work / method))
        result["device"] = report["device"]
        result["floor"] = report["floor"]
        result["methods"][method] = {**figures(report, spec), "bench_seconds": time.perf_counter() - began}
        if name == "eagle":  # a chain of gamma depths, each one drafter forward
            draft = result["methods"][method]["draft_ms_per_step"]
            result["methods"][method]["draft_ms_per_depth"] = draft / args.gamma if draft is not None else None
        print(f"{method}: c = {result['methods'][method]['c']:.3f} (draft "
              f"{result['methods'][method]['draft_ms_per_step']:.3f} ms a step, target forward "
              f"{result['methods'][method]['plain_forward_ms']:.3f} ms)", flush=True)
    plain_tps = [m["plain_tokens_per_second"] for m in result["methods"].values()]
    result["plain_tokens_per_second"] = sum(plain_tps) / len(plain_tps)
    (out / "published_drafters.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("files", "floor")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
