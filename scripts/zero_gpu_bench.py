"""ZeroGPU's speed, emulated beside a dedicated GPU's: the same runs in a GPU worker the way `spaces` 0.51 serves
GPU calls (specviz/service/zero_emulation.py: a worker forked from this process, kept and reused while its GPU
stays idle, a new one when it is not), and then in this process (a dedicated GPU). The worker runs with
SPACES_ZERO_GPU=1: CUDA graphs captured on its first call and kept (specviz/service/gpu_worker.py, preparing
bounded by CAPTURE_SECONDS), compiled unless SPECVIZ_COMPILE=0. This process runs with the environment's options
(a dedicated GPU's defaults: graphs and compile).

The calls, in order (every emulated one before this process touches CUDA: a forked worker cannot use a GPU its
parent initialised):
  fresh      a new worker's first call: it loads the model, prepares (the capture's seconds), runs the prompts
  reused     --reuse-calls more calls on the same worker: the steady state (nothing left to prepare)
  fresh-2    the worker retired (its GPU lent elsewhere), a new worker's first call: capture again (with compile
             on, torch's compile cache on disk may make it cheaper than the first)
  big-*      --big (e.g. random:llama-8b, random weights): a new worker's first call and one reused call, plain only
  dedicated  this process: the same runs as `reused` (its warm-up not timed), then --big's plain runs
Each call runs the prompts as the bench does: per prompt, an untimed one-token prefill, then plain decoding and
the method, timed on their own (no stop at EOS unless --stop-at-eos). Figures pool the prompts: tok/s is the new
tokens over the runs' wall time, the speedup plain's wall time over the method's.

    python -m scripts.zero_gpu_bench --out $OUT/zero_gpu.json                            # on the GPU machine
    SPECVIZ_COMPILE=0 python -m scripts.zero_gpu_bench --out $OUT/zero_gpu_eager_layers.json  # no compile (graphs only)
    python -m scripts.zero_gpu_bench --target random:llama-tiny --per-category 1 --limit 2 \\
        --max-new-tokens 8 --big random:llama-tiny --big-prompts 1 --out /tmp/zero.json  # anywhere, to check it

The default model is the file staged at /root/specviz-gpu where it is there (as scripts/gpu_suite.py finds it).
Nothing here imports gradio."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from scripts.gpu_suite import STAGED  # the GPU machine's staged default model: one place says where

PROMPTS = "data/spec_bench/question.jsonl"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="default", help="the model (default: the offline default)")
    parser.add_argument("--method", default="ngram",
                        help="METHOD[:GAMMA[:TREE]] beside plain (default: the app's, ngram)")
    parser.add_argument("--prompts", default=PROMPTS, help="a JSONL prompt file (default: Spec-Bench's)")
    parser.add_argument("--per-category", type=int, default=2, help="prompts a category (default 2: 26 prompts)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--stop-at-eos", action="store_true", help="stop a run at EOS (default: every run writes "
                        "--max-new-tokens)")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on a GPU, float32 on a CPU")
    parser.add_argument("--detail", action="store_true", help="records with the app's step detail (default: the "
                        "bench's, without)")
    parser.add_argument("--reuse-calls", type=int, default=2, help="calls on the reused worker (default 2)")
    parser.add_argument("--big", default="random:llama-8b", help="a big shape for plain ms a token, emulated and "
                        "dedicated ('none': skip; default random:llama-8b)")
    parser.add_argument("--big-prompts", type=int, default=4, help="prompts of the big runs (default 4)")
    parser.add_argument("--big-tokens", type=int, default=64, help="new tokens of each big run (default 64)")
    parser.add_argument("--capture-seconds", type=float, default=None,
                        help="the worker's bound on preparing (default: the app's, gpu_worker.CAPTURE_SECONDS)")
    parser.add_argument("--skip-dedicated", action="store_true", help="emulated calls only")
    parser.add_argument("--out", required=True, help="the JSON report")
    return parser.parse_args(argv)


# -- what one call computes (in a worker, or here) ------------------------------------------------------------

def measure(config: dict, zero_gpu: bool):
    """A GPU call: load (once a process), prepare within the bound, then per prompt plain decoding and the
    method, timed. Yields one dict of figures. zero_gpu: the options a ZeroGPU worker runs with."""
    from specviz.service import gpu_worker

    call = gpu_worker.begin_call()
    yield run_figures(config, zero_gpu, call)


def run_figures(config: dict, zero_gpu: bool, call: int) -> dict:
    import dataclasses

    import torch

    from specviz.service import gpu_worker
    from specviz.api import encode, make_proposer, run_once, warm_up
    from specviz.measure.bench import device_info, parse_method
    from specviz.models.loading import load_model
    from specviz.options import EngineOptions
    from specviz.proposers import PlainProposer
    from specviz.runners.graphs import graphs_captured
    from specviz.settings import DecodeSettings

    environ = {key: value for key, value in os.environ.items() if key != "SPACES_ZERO_GPU"}
    if zero_gpu:
        environ["SPACES_ZERO_GPU"] = "1"
    options = EngineOptions.from_environment(environ)
    bound = config["capture_seconds"] if zero_gpu else None  # a GPU of its own prepares as long as it takes
    started = time.perf_counter()
    target = load_model(config["target"], dtype=config["dtype"])  # the loader's registry: once a process
    load_seconds = time.perf_counter() - started
    base = DecodeSettings(max_new_tokens=config["max_new_tokens"], stop_at_eos=config["stop_at_eos"])
    method, settings = parse_method(config["method"], base) if config["method"] != "plain" else ("plain", base)
    prompt_ids = [encode(target, text) for text in config["prompts"]]
    length = min(max(map(len, prompt_ids)) + settings.max_new_tokens + settings.gamma + settings.tree + 1,
                 target.context_length)
    proposer = make_proposer(method, target, options=options)
    key = ("zero-gpu-bench", method, settings.gamma, settings.tree, length, config["detail"], options)
    preparation = gpu_worker.prepare(target.model, key, lambda: warm_up(
        target, settings.gamma + 1, length, [proposer], tree=settings.tree, device_loop=True,
        detail=config["detail"], options=options), bound)
    run_options = preparation.options_for_run(options)
    if preparation.eager:
        proposer = make_proposer(method, target, options=run_options)
    before = graphs_captured()
    totals = {"plain": [0, 0.0], method: [0, 0.0]}
    steps, identical, loops = 0, 0, set()
    for ids in prompt_ids:
        run_once(target, PlainProposer(), ids, dataclasses.replace(settings, max_new_tokens=1), detail=False,
                 options=run_options)  # untimed: a new prompt length's first prefill (as the bench does)
        plain = run_once(target, PlainProposer(), ids, settings, detail=config["detail"], options=run_options)
        runs = [("plain", plain)]
        if method != "plain":
            result = run_once(target, proposer, ids, settings, detail=config["detail"], options=run_options)
            runs.append((method, result))
            steps += len(result.steps)
            identical += result.token_ids == plain.token_ids
        for name, result in runs:
            totals[name][0] += result.metrics.new_tokens
            totals[name][1] += result.metrics.wall_seconds
            loops.add(result.settings.get("loop"))
    figures = {
        "pid": os.getpid(), "call": call, "zero_gpu": zero_gpu, "device": device_info(target.device),
        "dtype": str(target.dtype).replace("torch.", ""), "options": dataclasses.asdict(run_options),
        "loops": sorted(str(loop) for loop in loops), "load_seconds": load_seconds,
        "preparation": dataclasses.asdict(preparation), "graphs_captured_while_timed": graphs_captured() - before,
        "prompts": len(prompt_ids), "method": config["method"],
    }
    for name, (tokens, seconds) in totals.items():
        if tokens:
            figures[name] = {"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds,
                             "ms_per_token": 1e3 * seconds / tokens}
    if method != "plain" and totals[method][1] > 0:
        figures["speedup"] = totals["plain"][1] / totals[method][1]
        figures["tau"] = totals[method][0] / steps if steps else None
        figures["identical"] = f"{identical}/{len(prompt_ids)}" if settings.greedy else None
    if torch.cuda.is_available() and target.device.type == "cuda":
        figures["gpu_memory_gib"] = torch.cuda.max_memory_allocated(target.device) / 2 ** 30
    return figures


# -- the calls ------------------------------------------------------------------------------------------------

def emulated_calls(config: dict, big: dict | None, reuse_calls: int) -> dict:
    """Every emulated call, in order, before this process touches CUDA."""
    from specviz.service.zero_emulation import GpuFunction

    worker = GpuFunction(measure)
    calls = {}

    def call(name: str, settings: dict) -> None:
        print(f"zero_gpu_bench: {name} (emulated ZeroGPU worker)…", file=sys.stderr, flush=True)
        try:
            calls[name], = list(worker(settings, True))
        except Exception as error:  # the worker's traceback is in the log above; the other calls still run
            calls[name] = {"error": f"{type(error).__name__}: {error}"}

    call("fresh", config)
    for number in range(1, reuse_calls + 1):
        call(f"reused-{number}", config)
    worker.retire()  # the GPU lent elsewhere meanwhile: the next call forks a new worker
    call("fresh-2", config)
    if big is not None:
        worker.retire()
        call("big-fresh", big)
        call("big-reused", big)
    worker.retire()
    return calls


def dedicated_calls(config: dict, big: dict | None) -> dict:
    """The same runs in this process: a dedicated GPU. Its warm-up (capture, compile) is outside the timed runs:
    the figures are those of a run after the first."""
    calls = {}
    for name, settings in (("dedicated", config), ("big-dedicated", big)):
        if settings is None:
            continue
        print(f"zero_gpu_bench: {name} (this process)…", file=sys.stderr, flush=True)
        first, = list(measure(settings, False))
        calls[name], = list(measure(settings, False))
        calls[name]["first_call"] = {key: first[key] for key in ("load_seconds", "preparation")}
    return calls


# -- the report -----------------------------------------------------------------------------------------------

def summary(calls: dict) -> dict:
    """The figures the goals name: steady-state plain tok/s on a reused worker, the method's speedup there and
    on the dedicated GPU, a fresh worker's capture seconds, the big shape's plain ms a token both ways."""
    calls = {name: figures for name, figures in calls.items() if "error" not in figures}
    reused = [calls[name] for name in calls if name.startswith("reused-")]
    steady = reused[-1] if reused else None
    out = {
        "steady_plain_tokens_per_second": steady["plain"]["tokens_per_second"] if steady else None,
        "steady_speedup": steady.get("speedup") if steady else None,
        "dedicated_plain_tokens_per_second": calls.get("dedicated", {}).get("plain", {}).get("tokens_per_second"),
        "dedicated_speedup": calls.get("dedicated", {}).get("speedup"),
        "fresh_capture_seconds": [calls[name]["preparation"]["seconds"] for name in ("fresh", "fresh-2")
                                  if name in calls],
        "fresh_eager": [calls[name]["preparation"]["eager"] for name in ("fresh", "fresh-2") if name in calls],
        "reused_same_worker": bool(reused) and "fresh" in calls and all(c["pid"] == calls["fresh"]["pid"]
                                                                        for c in reused),
        "reused_prepared_nothing": bool(reused) and not any(c["preparation"]["needed"] for c in reused),
    }
    for name in ("big-reused", "big-dedicated"):
        if name in calls:
            out[f"{name.replace('-', '_')}_plain_ms_per_token"] = calls[name]["plain"]["ms_per_token"]
    return out


def format_table(calls: dict) -> str:
    def cell(value, spec):
        return "-".rjust(int(spec.split(".")[0])) if value is None else format(value, spec)

    lines = [f"{'call':<14} {'pid':>7} {'#':>2} {'load s':>7} {'prep s':>7} {'graphs':>6} {'eager':>5} "
             f"{'plain tok/s':>11} {'plain ms/tok':>12} {'method tok/s':>12} {'speedup':>7} {'τ':>5} {'loop':>8}"]
    for name, c in calls.items():
        if "error" in c:
            lines.append(f"{name:<14} failed: {c['error']}")
            continue
        preparation = c["preparation"]
        method = next((c[k] for k in c if isinstance(c[k], dict) and "tokens_per_second" in c[k] and k != "plain"),
                      None)
        lines.append(
            f"{name:<14} {c['pid']:>7} {c['call']:>2} {c['load_seconds']:>7.1f} {preparation['seconds']:>7.2f} "
            f"{preparation['graphs']:>6} {'yes' if preparation['eager'] else 'no':>5} "
            f"{cell(c.get('plain', {}).get('tokens_per_second'), '11.1f')} "
            f"{cell(c.get('plain', {}).get('ms_per_token'), '12.3f')} "
            f"{cell(method['tokens_per_second'] if method else None, '12.1f')} {cell(c.get('speedup'), '7.2f')} "
            f"{cell(c.get('tau'), '5.2f')} {','.join(c['loops']):>8}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if not os.environ.get("SPECVIZ_DEFAULT_GGUF") and Path(STAGED).is_file():
        os.environ["SPECVIZ_DEFAULT_GGUF"] = STAGED  # the GPU machine's staged default model (docs/gpu.md)
    from specviz.measure.bench import load_prompts
    from specviz.service.gpu_worker import CAPTURE_SECONDS

    prompts = [p["prompt"] for p in load_prompts(args.prompts, args.limit, args.per_category)]
    config = {"target": args.target, "method": args.method, "prompts": prompts, "max_new_tokens": args.max_new_tokens,
              "stop_at_eos": args.stop_at_eos, "dtype": args.dtype, "detail": args.detail,
              "capture_seconds": CAPTURE_SECONDS if args.capture_seconds is None else args.capture_seconds}
    big = None if args.big == "none" else {**config, "target": args.big, "method": "plain",
                                           "prompts": prompts[:args.big_prompts], "max_new_tokens": args.big_tokens}
    started = time.perf_counter()
    calls = emulated_calls(config, big, args.reuse_calls)
    if not args.skip_dedicated:
        calls.update(dedicated_calls(config, big))
    report = {"config": {**{k: v for k, v in config.items() if k != "prompts"}, "prompts": len(prompts),
                         "big": args.big, "big_prompts": len(big["prompts"]) if big else 0,
                         "big_tokens": args.big_tokens, "reuse_calls": args.reuse_calls,
                         "environment": {k: v for k, v in os.environ.items()
                                         if k.startswith("SPECVIZ_") or k == "SPACES_ZERO_GPU"}},
              "summary": summary(calls), "calls": calls, "seconds": time.perf_counter() - started}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(format_table(calls))
    print(json.dumps(report["summary"], indent=1))
    print(f"written to {args.out}", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
