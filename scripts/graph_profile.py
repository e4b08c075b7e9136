"""Where a device-loop step's time goes on the GPU: one run of each method under torch.profiler, its kernels
grouped by the CUDA graph replay that launched them (the lookup graph, i.e. the drafting, and the verify
graph), and for each kind of replay: how many kernels it runs, how long it spans on the card, how much of that
span a kernel is running (busy) and how much is the gaps between kernels, and which kernels take the time.

A replay whose span is mostly gaps is bound by its kernels' count (each costs a few microseconds to start even
inside a graph), not by the work they do: fewer, fused kernels would make it cheaper; faster kernels would not.

    python3 -m scripts.graph_profile --methods eagle:6:31,eagle:4,draft:4@0.5,medusa:4:31 --out $OUT/profile.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections import Counter, defaultdict

import torch

from specviz import load_model
from specviz.api import encode, make_proposer, run_once
from specviz.measure.bench import parse_method
from specviz.proposers.checkpoints import load_draft_model
from specviz.settings import DecodeSettings

PROMPT = ("Explain how a hash map handles collisions, then write a short Python function that counts the words "
          "in a text with a dictionary, and explain it line by line.")


def add_run_arguments(parser: argparse.ArgumentParser, methods: str, temperature: float, max_new_tokens: int) -> None:
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


def graph_replays(events: list[dict]) -> list[list[dict]]:
    """The kernels of each CUDA graph launch in a Chrome trace's events, in launch order: a kernel carries the
    correlation id of the runtime call that launched it, here cudaGraphLaunch."""
    launches = sorted((e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("cudaGraphLaunch")),
                      key=lambda e: e["ts"])
    kernels = defaultdict(list)
    for event in events:
        if event.get("ph") == "X" and event.get("cat") == "kernel":
            kernels[event.get("args", {}).get("correlation")].append(event)
    replays = []
    for launch in launches:
        group = sorted(kernels.get(launch.get("args", {}).get("correlation"), []), key=lambda e: e["ts"])
        if group:
            replays.append(group)
    return replays


def replay_figures(kernels: list[dict]) -> dict:
    """One replay's kernel count, span (first start to last end, us), busy time (the kernels' own, us)."""
    start = kernels[0]["ts"]
    end = max(k["ts"] + k["dur"] for k in kernels)
    return {"kernels": len(kernels), "span_us": end - start, "busy_us": sum(k["dur"] for k in kernels)}


def kinds_of_replay(replays: list[list[dict]], top: int = 6) -> list[dict]:
    """Replays sorted into kinds by their kernel count (a step's lookup graph and verify graph run different
    counts), each kind with its median figures and the kernels that take most of its busy time."""
    by_count = defaultdict(list)
    for kernels in replays:
        by_count[len(kernels)].append(kernels)
    kinds = []
    for count, group in sorted(by_count.items(), key=lambda item: -len(item[1])):
        figures = [replay_figures(kernels) for kernels in group]
        time_by_name = Counter()
        for kernels in group:
            for k in kernels:
                time_by_name[k["name"][:60]] += k["dur"] / len(group)
        span = statistics.median(f["span_us"] for f in figures)
        busy = statistics.median(f["busy_us"] for f in figures)
        kinds.append({"kernels": count, "replays": len(group), "span_us": span, "busy_us": busy,
                      "gaps_us_per_kernel": (span - busy) / max(count - 1, 1),
                      "short_kernels": sum(k["dur"] < 3 for k in group[0]),
                      "top": [(name, round(us, 1)) for name, us in time_by_name.most_common(top)]})
    return kinds


def profile_run(target, name: str, draft, settings) -> dict:
    def run():
        return run_once(target, make_proposer(name, target, draft), encode(target, PROMPT), settings, detail=False)

    run()  # graphs captured and kernels compiled outside the profile and the timing
    first = run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as profiler:
        result = run()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        profiler.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    kinds = kinds_of_replay(graph_replays(events))
    return {"loop": result.settings["loop"], "tau": result.metrics.mean_accepted_length,
            "steps": result.metrics.target_forwards, "unprofiled_tok_s": first.metrics.tokens_per_second,
            "kinds": kinds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, methods="plain,eagle:6:31,eagle:4,draft:4@0.5,medusa:4:31", temperature=0.0,
                      max_new_tokens=128)
    args = parser.parse_args(argv)
    target, draft, runs = method_runs(args)
    report = {}
    for method, name, settings in runs:
        report[method] = found = profile_run(target, name, draft, settings)
        print(f"{method} ({found['loop']} loop, {found['steps']} steps, tau {found['tau']:.2f}, "
              f"{found['unprofiled_tok_s']:.0f} tok/s unprofiled)", flush=True)
        if not found["kinds"]:
            print("  no CUDA graph replays seen (a CPU run, or the host loop)")
        for kind in found["kinds"]:
            print(f"  {kind['replays']:>4} replays of {kind['kernels']:>4} kernels: span {kind['span_us']:7.1f} us, "
                  f"busy {kind['busy_us']:7.1f} us, gap {kind['gaps_us_per_kernel']:.2f} us a kernel, "
                  f"{kind['short_kernels']} kernels under 3 us")
            for kernel, us in kind["top"]:
                print(f"       {us:7.1f} us  {kernel}")
    with open(args.out, "w") as f:
        json.dump({"settings": vars(args), "prompt": PROMPT, "methods": report}, f, indent=1)


if __name__ == "__main__":
    main()
