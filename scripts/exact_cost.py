"""What the exact mode costs plain decoding (runners/exact.py): ms a token with the mode on and off, in turns in one
process, over the same prompts; the ratio of the medians is the figure docs/exactness.md quotes.

    python -m scripts.exact_cost --target default --dtype bfloat16 --per-category 1 --rounds 3
    python -m scripts.exact_cost --target random:llama-8b --dtype bfloat16 --limit 4

Greedy plain decoding of each prompt, max-new-tokens each, graphs captured before anything is timed; the
outputs of the two modes are compared too (they may differ: the mode changes plain decoding's rounding)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

from specviz.api import encode, resolve_models, run_once, warm_up
from specviz.measure.bench import load_prompts
from specviz.options import EngineOptions
from specviz.proposers import PlainProposer
from specviz.settings import DecodeSettings


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="default", help="a model name, folder, .gguf or random:SHAPE")
    parser.add_argument("--dtype", default="bfloat16", help="the target's dtype")
    parser.add_argument("--device", default=None, help="cuda (the default where there is one) or cpu")
    parser.add_argument("--prompts", default="data/spec_bench/question.jsonl", help="JSONL prompts (Spec-Bench's)")
    parser.add_argument("--per-category", type=int, default=None, help="the first N prompts of each category")
    parser.add_argument("--limit", type=int, default=4, help="the first N prompts (without --per-category)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens a prompt")
    parser.add_argument("--rounds", type=int, default=3, help="turns of (on, off) over all prompts")
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    target, _ = resolve_models(args.target, None, args.device, args.dtype)
    prompts = load_prompts(args.prompts, limit=None if args.per_category else args.limit,
                           per_category=args.per_category)
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, stop_at_eos=False)
    encoded = [encode(target, p["prompt"], True) for p in prompts]
    base = EngineOptions.from_environment()
    modes = {"on": dataclasses.replace(base, exact=True), "off": dataclasses.replace(base, exact=False)}
    longest = max(len(ids) for ids in encoded) + args.max_new_tokens + 1
    for options in modes.values():
        warm_up(target, 1, min(longest, target.context_length), [], device_loop=True, options=options)
    times = {name: [] for name in modes}
    outputs = {name: [] for name in modes}
    for round_ in range(args.rounds):
        for name, options in modes.items():
            seconds = tokens = 0
            outputs[name] = []
            for ids in encoded:
                result = run_once(target, PlainProposer(), ids, settings, detail=False, options=options)
                seconds += result.metrics.wall_seconds
                tokens += len(result.token_ids)
                outputs[name].append(result.token_ids)
            times[name].append(1e3 * seconds / tokens)
            print(f"round {round_ + 1}: exact {name}: {times[name][-1]:.3f} ms a token", flush=True)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    same = sum(a == b for a, b in zip(outputs["on"], outputs["off"]))
    print(f"{target.name} {args.dtype}, {len(encoded)} prompts x {args.max_new_tokens} tokens: exact on {on:.3f}, "
          f"off {off:.3f} ms a token: {on / off:.3f}x; outputs equal in both modes on {same} of {len(encoded)}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"target": target.name, "dtype": args.dtype, "prompts": len(encoded),
                       "max_new_tokens": args.max_new_tokens, "ms_a_token": times, "ratio": on / off,
                       "outputs_equal_between_modes": same}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
