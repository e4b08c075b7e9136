"""The app's records (detail: top tokens, p and q at every draft) against the bench's lean records, on the device
loop and on the host loop: tokens per second of the same prompt, method and settings each way, the ways taking
turns within a repeat so that drift falls on all of them. Each way runs once untimed first (its graphs captured).

    python3 -m scripts.detail_speed --methods eagle:4,retrieval:16:31 --temperature 0.8 --out $OUT/detail.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

from specviz import load_model
from specviz.api import encode, make_proposer, run_once
from specviz.measure.bench import parse_method
from specviz.proposers.checkpoints import load_draft_model
from specviz.settings import DecodeSettings

PROMPT = ("Explain how a hash map handles collisions, then write a short Python function that counts the words "
          "in a text with a dictionary, and explain it line by line.")
WAYS = {"device, lean": ("1", False), "device, detail": ("1", True), "host, detail": ("0", True)}


def add_run_arguments(parser: argparse.ArgumentParser, methods: str, temperature: float, max_new_tokens: int) -> None:
    """The options a one-prompt tool's runs share (scripts.graph_profile takes them too)."""
    parser.add_argument("--methods", default=methods)
    parser.add_argument("--temperature", type=float, default=temperature)
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True)


def method_runs(args):
    """The target, the distilled draft model, and (method, proposer name, settings) for each of args.methods:
    the run's whole length (no stop at EOS), seed 0."""
    target = load_model("default", device=args.device, dtype=args.dtype)
    draft = load_draft_model("distilled", target)
    base = DecodeSettings(max_new_tokens=args.max_new_tokens, stop_at_eos=False, temperature=args.temperature, seed=0)
    return target, draft, [(method, *parse_method(method, base)) for method in args.methods.split(",")]


def tokens_per_second(target, name: str, draft, settings, loop: str, detail: bool) -> tuple[float, str]:
    os.environ["SPECVIZ_DEVICE_LOOP"] = loop
    result = run_once(target, make_proposer(name, target, draft), encode(target, PROMPT), settings, detail=detail)
    return result.metrics.tokens_per_second, result.settings["loop"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, methods="eagle:4,retrieval:16:31", temperature=0.8, max_new_tokens=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    target, draft, runs = method_runs(args)
    report = {}
    for method, name, settings in runs:
        for loop, detail in WAYS.values():  # untimed: graphs captured, kernels compiled
            tokens_per_second(target, name, draft, settings, loop, detail)
        rates = {way: [] for way in WAYS}
        loops = {}
        for _ in range(args.repeats):
            for way, (loop, detail) in WAYS.items():
                rate, loops[way] = tokens_per_second(target, name, draft, settings, loop, detail)
                rates[way].append(rate)
        medians = {way: statistics.median(values) for way, values in rates.items()}
        report[method] = {"tokens_per_second": rates, "median": medians, "loop": loops}
        print(method, {way: f"{value:.0f} tok/s ({loops[way]} loop)" for way, value in medians.items()},
              f"detail/lean on the device {medians['device, detail'] / medians['device, lean']:.2f}",
              f"device/host with detail {medians['device, detail'] / medians['host, detail']:.2f}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"settings": vars(args), "prompt": PROMPT, "methods": report}, f, indent=1)


if __name__ == "__main__":
    main()
