"""The bench at several batch sizes (`bench --batch-sizes 1,2,4,...`): each method and plain decoding on the
same prompts (batch.py), side by side in one process, and per method and batch size the whole batch's tokens/s,
a sequence's latency a token, tau, and the speedup over plain decoding of the same prompts at that size.

At each size every prompt goes through one refill queue (decode_batch(..., batch_size=B)): a finished row's slot
takes the next prompt, so the batch stays full until the queue runs dry; with fewer prompts than B, prompts
repeat to fill the first batch. Batch 1 runs through the single-sequence loop (batch.py says why); with
compare_single (`--compare-single`) batch 1 also runs through the batched runner, so the two stand side by side
(rows carry `path`: "single" or "batched")."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from ..api import batch_drafting, check_batchable, encode, make_proposer, resolve_models, warm_up
from ..engine.batch import BatchRun, decode_batch, single_proposer
from .bench import device_info, load_prompts
from ..methods import parse_batch_sizes, parse_method  # noqa: F401  (re-exported: bench's argument syntax)
from ..errors import InvalidSettingError
from ..options import EngineOptions
from ..settings import DecodeSettings


def batches_of(items: list, size: int) -> list[list]:
    """Every item at least once, in batches of `size`; the last batch filled from the start again, so that
    every batch has `size` rows (a batch of 64 from 26 prompts repeats some)."""
    count = max(1, -(-len(items) // size))
    return [[items[(b * size + i) % len(items)] for i in range(size)] for b in range(count)]


def queue_of(items: list, size: int) -> list:
    """Every item once, or, with fewer items than `size`, repeated from the start to fill one batch of `size`."""
    return [items[i % len(items)] for i in range(max(len(items), size))]


def row_of(run: BatchRun, plain: BatchRun, method: str, batch_size: int) -> dict:
    """One measured batch (or refill queue), as summarize_batches reads it; identical_rows counts the prompts
    whose output is the same prompt's in plain decoding."""
    return {"method": method, "batch_size": batch_size, "path": run.path, "rows": len(run.token_ids),
            "new_tokens": run.new_tokens,
            "wall_seconds": run.wall_seconds, "prefill_seconds": run.prefill_seconds,
            "ms_per_token": run.ms_per_token, "row_forwards": sum(run.row_forwards), "forwards": run.forwards,
            "drafted": run.drafted, "accepted": run.accepted,
            "identical_rows": sum(a == b for a, b in zip(run.token_ids, plain.token_ids))}


def summarize_batches(rows: list[dict]) -> list[dict]:
    """Per method, batch size and path: pooled tokens/s (all tokens over all seconds), the mean latency a
    token, tau, alpha, and the speedup over plain decoding of the same prompts at that size on that path."""
    groups = defaultdict(list)
    for row in rows:
        groups[(row["method"], row["batch_size"], row.get("path", "batched"))].append(row)
    out = []
    for (method, size, path), group in groups.items():
        plain = groups[("plain", size, path)]
        tokens, wall = sum(r["new_tokens"] for r in group), sum(r["wall_seconds"] for r in group)
        plain_tps = sum(r["new_tokens"] for r in plain) / sum(r["wall_seconds"] for r in plain)
        drafted = sum(r["drafted"] for r in group)
        out.append({"method": method, "batch_size": size, "path": path, "batches": len(group),
                    "tokens_per_second": tokens / wall,
                    "ms_per_token": sum(r["ms_per_token"] for r in group) / len(group),
                    "mean_accepted_length": tokens / sum(r["row_forwards"] for r in group),
                    "acceptance_rate": sum(r["accepted"] for r in group) / drafted if drafted else None,
                    "speedup": (tokens / wall) / plain_tps,
                    "identical_share": sum(r["identical_rows"] for r in group) / sum(r["rows"] for r in group)})
    return sorted(out, key=lambda s: (s["method"] != "plain", s["method"], s["batch_size"], s["path"]))


def crossover(summary: list[dict], method: str) -> int | None:
    """The smallest batch size at which `method` no longer beats plain decoding (None: it wins at every size);
    at batch 1, the path the bench decodes batch 1 with by default (the single-sequence loop)."""
    single_at_one = any(s["batch_size"] == 1 and s.get("path") == "single" for s in summary)
    losing = [s["batch_size"] for s in summary if s["method"] == method and s["speedup"] <= 1.0
              and not (single_at_one and s["batch_size"] == 1 and s.get("path", "batched") == "batched")]
    return min(losing) if losing else None


def format_batches(summary: list[dict]) -> str:
    lines = [f"{'method':<16}{'batch':>6}{'path':>9}{'tok/s':>10}{'ms/token':>10}{'tau':>6}{'alpha':>7}"
             f"{'speedup':>9}"]
    for s in summary:
        alpha = "-" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
        lines.append(f"{s['method']:<16}{s['batch_size']:>6}{s.get('path', 'batched'):>9}"
                     f"{s['tokens_per_second']:>10.1f}{s['ms_per_token']:>10.2f}"
                     f"{s['mean_accepted_length']:>6.2f}{alpha:>7}{s['speedup']:>8.2f}x")
    for method in sorted({s["method"] for s in summary} - {"plain"}):
        turn = crossover(summary, method)
        lines.append(f"{method}: " + ("beats plain at every batch size measured" if turn is None
                                      else f"stops paying at batch {turn}"))
    return "\n".join(lines)


def run_batch_bench(prompts_file: str, methods: list[str], batch_sizes: list[int], settings: DecodeSettings,
                    out: str, target: str = "default", device: str | None = None, dtype: str | None = None,
                    chat: bool = True, limit: int | None = None, per_category: int | None = None,
                    progress=None, draft: str | None = None, exit_layer: int | None = None,
                    compare_single: bool = False) -> dict:
    """Greedy or sampled; each prompt's output is compared with the same prompt's in plain decoding at that size.
    draft: the draft model for `draft` ('default': the target drafting for itself). compare_single: batch 1
    also through the batched runner, beside the single-sequence loop (the module's docstring)."""
    entries = {spec: parse_method(spec, settings) for spec in methods if spec != "plain"}
    for method, method_settings in entries.values():
        check_batchable(method)
        if method_settings.tree or method_settings.draft_stop:
            raise InvalidSettingError("batched decoding drafts chains of gamma tokens: write METHOD or METHOD:GAMMA")
    prompts = load_prompts(prompts_file, limit, per_category)
    target_model, draft_model = resolve_models(target, draft, device, dtype)
    drafting = {spec: batch_drafting(method, target_model, draft_model, exit_layer)
                for spec, (method, _) in entries.items()}
    encoded = [encode(target_model, p["prompt"], chat) for p in prompts]
    plan = [(size, path) for size in batch_sizes
            for path in (("single", "batched") if size == 1 and compare_single else ("auto",))]
    plain_factory = lambda: make_proposer("plain", target_model)  # noqa: E731
    if 1 in batch_sizes:  # the single-sequence loop's graphs, captured before anything is timed (as bench does)
        widest = max([settings.gamma, *(s.gamma for _, s in entries.values())]) + 1
        length = min(max(len(ids) for ids in encoded) + settings.max_new_tokens + widest,
                     target_model.context_length)
        warm_up(target_model, widest, length, device_loop=True)
        for spec, (method, method_settings) in entries.items():
            warm_up(target_model, method_settings.gamma + 1, length, [single_proposer(drafting[spec])],
                    device_loop=True)
    for path in {"batched" if size > 1 or p != "auto" else "single" for size, p in plan}:  # untimed: first calls
        for spec, (method, method_settings) in [("plain", ("plain", settings)), *entries.items()]:
            decode_batch(target_model, plain_factory if spec == "plain" else drafting[spec], encoded[:1],
                         DecodeSettings(max_new_tokens=4, gamma=method_settings.gamma), path=path)
    total, done, rows = len(plan) * (len(entries) + 1), 0, []
    # batched forwards on a GPU are graphs of a few shapes per size: each size runs once untimed to capture them
    capture_first = target_model.device.type == "cuda" and EngineOptions.from_environment().graphs
    for size, path in plan:
        queue = queue_of(encoded, size)
        if capture_first and (path == "batched" or (path == "auto" and size > 1)):
            for spec, (method, method_settings) in [("plain", ("plain", settings)), *entries.items()]:
                decode_batch(target_model, plain_factory if spec == "plain" else drafting[spec], queue,
                             method_settings, batch_size=size, path=path)
        plain = decode_batch(target_model, plain_factory, queue, settings, batch_size=size, path=path)
        for spec, (method, method_settings) in [("plain", ("plain", settings)), *entries.items()]:
            run = plain if spec == "plain" else decode_batch(target_model, drafting[spec], queue, method_settings,
                                                             batch_size=size, path=path)
            rows.append(row_of(run, plain, spec, size))
            done += 1
            if progress:
                progress(done, total, f"{spec} at batch {size}" + (f" ({run.path})" if size == 1 else ""))
    summary = summarize_batches(rows)
    report = {"device": device_info(target_model.device),
              "config": {"target": target, "draft": draft, "methods": ["plain", *entries], "batch_sizes": batch_sizes,
                         "compare_single": compare_single,
                         "prompts_file": prompts_file, "prompts": len(prompts), "chat": chat,
                         "dtype": str(target_model.dtype).replace("torch.", ""), **settings.__dict__},
              "results": rows, "summary": summary,
              "crossover": {m: crossover(summary, m) for m in entries}}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1))
    print(format_batches(summary))
    print(f"written to {out}", file=sys.stderr)
    return report
