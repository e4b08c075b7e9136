"""`specviz bench`: every prompt through plain decoding and each method, in one process on one device, so
that every speedup is a ratio measured side by side."""
from __future__ import annotations

import json
import platform
import sys
from collections import defaultdict
from pathlib import Path

import torch

from .api import encode, make_proposer, run_once, warm_up, first_difference
from .errors import InvalidSettingError
from .models import load_model
from .proposers import METHODS, PlainProposer
from .settings import DecodeSettings


def load_prompts(path: str, limit: int | None = None, per_category: int | None = None) -> list[dict]:
    """JSONL lines with "turns" (Spec-Bench: the first turn is used) or "prompt", optional "category" and
    "question_id" or "id"."""
    file = Path(path)
    if not file.is_file():
        raise InvalidSettingError(f"prompt file {path} does not exist")
    prompts, seen = [], defaultdict(int)
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidSettingError(f"{path} line {number} is not JSON: {error.msg}") from None
        text = row.get("prompt") or (row.get("turns") or [None])[0]
        if not isinstance(text, str) or not text.strip():
            raise InvalidSettingError(f"{path} line {number} has neither 'prompt' nor 'turns'")
        category = str(row.get("category", "all"))
        if per_category is not None and seen[category] >= per_category:
            continue
        seen[category] += 1
        prompts.append({"prompt_id": row.get("question_id", row.get("id", number)), "category": category, "prompt": text})
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise InvalidSettingError(f"no prompts in {path}")
    return prompts


def device_info(device: torch.device) -> dict:
    import transformers

    info = {"device": str(device), "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version()}
    if device.type == "cuda":
        info["name"] = torch.cuda.get_device_name(device)
    else:
        info["name"] = platform.processor() or platform.machine()
    return info


def _row(prompt: dict, method: str, result, plain) -> dict:
    metrics = result.metrics
    greedy = result.settings.get("temperature", 0) == 0
    return {
        "prompt_id": prompt["prompt_id"], "category": prompt["category"], "method": method,
        "new_tokens": metrics.new_tokens, "wall_seconds": metrics.wall_seconds,
        "tokens_per_second": metrics.tokens_per_second, "mean_accepted_length": metrics.mean_accepted_length,
        "acceptance_rate": metrics.acceptance_rate, "drafted": metrics.drafted, "accepted": metrics.accepted,
        "target_forwards": metrics.target_forwards, "draft_seconds": metrics.draft_seconds,
        "verify_seconds": metrics.verify_seconds,
        "speedup": plain.metrics.wall_seconds / metrics.wall_seconds if metrics.wall_seconds > 0 else None,
        "identical_to_plain": (first_difference(result.token_ids, plain.token_ids) is None) if greedy else None,
    }


def aggregate(rows: list[dict], plain_rows: list[dict]) -> dict:
    """Pooled figures: tok/s = all tokens / all seconds; speedup = that over plain's on the same prompts."""
    tokens = sum(r["new_tokens"] for r in rows)
    wall = sum(r["wall_seconds"] for r in rows)
    drafted = sum(r["drafted"] for r in rows)
    plain_tps = sum(r["new_tokens"] for r in plain_rows) / max(1e-9, sum(r["wall_seconds"] for r in plain_rows))
    tps = tokens / wall if wall else 0.0
    identical = [r["identical_to_plain"] for r in rows if r["identical_to_plain"] is not None]
    return {
        "prompts": len(rows), "new_tokens": tokens, "wall_seconds": wall, "tokens_per_second": tps,
        "mean_accepted_length": tokens / max(1, sum(r["target_forwards"] for r in rows)),
        "acceptance_rate": sum(r["accepted"] for r in rows) / drafted if drafted else None,
        "speedup": tps / plain_tps if plain_tps else None,
        "identical_share": sum(identical) / len(identical) if identical else None,
    }


def summarize_results(results: list[dict]) -> dict:
    by_method = defaultdict(list)
    for row in results:
        by_method[row["method"]].append(row)
    plain_rows = by_method["plain"]
    summary = {}
    for method, rows in by_method.items():
        categories = sorted({r["category"] for r in rows})
        summary[method] = {
            "overall": aggregate(rows, plain_rows),
            "per_category": {c: aggregate([r for r in rows if r["category"] == c],
                                          [r for r in plain_rows if r["category"] == c]) for c in categories},
        }
    return summary


def format_table(summary: dict) -> str:
    lines = [f"{'method':<22}{'category':<16}{'tau':>6}{'alpha':>7}{'tok/s':>9}{'speedup':>9}{'identical':>10}"]
    for method, block in summary.items():
        for category, figures in [("overall", block["overall"]), *block["per_category"].items()]:
            alpha = "-" if figures["acceptance_rate"] is None else f"{figures['acceptance_rate']:.2f}"
            identical = "-" if figures["identical_share"] is None else f"{figures['identical_share']:.0%}"
            lines.append(f"{method:<22}{category:<16}{figures['mean_accepted_length']:>6.2f}{alpha:>7}"
                         f"{figures['tokens_per_second']:>9.1f}{figures['speedup']:>8.2f}x{identical:>10}")
    return "\n".join(lines)


def run_bench(prompts_file: str, methods: list[str], settings: DecodeSettings, out: str, target: str = "default",
              draft: str | None = None, device: str | None = None, dtype: str | None = None, chat: bool = True,
              exit_layer: int | None = None, limit: int | None = None, per_category: int | None = None,
              device_map: str | dict | None = None, max_memory: str | dict | None = None,
              draft_device: str | None = None) -> dict:
    from tqdm.auto import tqdm

    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise InvalidSettingError(f"unknown method(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(METHODS)}")
    prompts = load_prompts(prompts_file, limit, per_category)
    target_model = load_model(target, device, dtype, device_map, max_memory)
    draft_model = load_model(draft, draft_device or str(target_model.device), dtype) if draft else None
    for method in methods:  # fail on a bad method/drafter before the long run, not after it
        make_proposer(method, target_model, draft_model, exit_layer)
    warm_up(target_model)
    results = []
    methods = [m for m in methods if m != "plain"]
    with tqdm(total=len(prompts) * (len(methods) + 1), desc="bench", unit="run", file=sys.stderr) as bar:
        for prompt in prompts:
            ids = encode(target_model, prompt["prompt"], chat)
            plain = run_once(target_model, PlainProposer(), ids, settings, prompt["prompt"])
            results.append(_row(prompt, "plain", plain, plain))
            bar.update()
            for method in methods:
                result = run_once(target_model, make_proposer(method, target_model, draft_model, exit_layer), ids,
                                  settings, prompt["prompt"])
                results.append(_row(prompt, method, result, plain))
                bar.set_postfix_str(f"{method} {results[-1]['speedup']:.2f}x")
                bar.update()
    report = {
        "device": device_info(target_model.device),
        "config": {"target": target, "draft": draft, "device_map": device_map, "max_memory": max_memory,
                   "target_devices": target_model.devices, "methods": ["plain", *methods], "prompts_file": prompts_file,
                   "prompts": len(prompts), "chat": chat, "exit_layer": exit_layer, **settings.__dict__},
        "results": results,
        "summary": summarize_results(results),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1))
    print(format_table(report["summary"]))
    print(f"written to {out}", file=sys.stderr)
    return report
