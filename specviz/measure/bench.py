"""`specviz bench`: every prompt through plain decoding and each method, in one process on one device, so
that every speedup is a ratio measured side by side. Optionally transformers' own `generate()` (plain, with
prompt lookup, with an assistant model) on the same prompts, same model, same card, for comparison."""
from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

from ..runners.clock import device_clock
from ..api import encode, first_difference, make_proposer, run_once, warm_up
from ..errors import InvalidSettingError
from .energy import energy_lines, energy_meter
from .floor import describe_floor, weight_read_floor
from ..models.loading import load_model
from ..records.oracle import pooled_histogram, run_oracle
from ..methods import names, parse_method  # noqa: F401  (parse_method: bench's METHOD:GAMMA[:TREE][@STOP])
from ..proposers import PlainProposer
from ..proposers.checkpoints import load_draft_model
from ..settings import DecodeSettings

HF_BASELINES = ("hf-generate", "hf-prompt-lookup", "hf-assisted")


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
        prompts.append({"prompt_id": row.get("question_id", row.get("id", number)), "category": category,
                        "prompt": text})
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise InvalidSettingError(f"no prompts in {path}")
    return prompts


def pick_subset(prompts: list[dict], per_category: int | None, limit: int | None = None) -> set:
    """prompt_ids of the first `per_category` prompts of each category (all when None); with `limit`, that
    many of them, spread evenly over the list (so over the categories)."""
    seen, chosen = defaultdict(int), []
    for prompt in prompts:
        if per_category is None or seen[prompt["category"]] < per_category:
            seen[prompt["category"]] += 1
            chosen.append(prompt["prompt_id"])
    if limit is not None and limit < len(chosen):
        chosen = [chosen[round(i * len(chosen) / limit)] for i in range(limit)]
    return set(chosen)


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
    difference = first_difference(result.token_ids, plain.token_ids) if greedy else None
    oracle = run_oracle(result, plain.metrics.wall_seconds)
    return {
        "prompt_id": prompt["prompt_id"], "category": prompt["category"], "method": method,
        "new_tokens": metrics.new_tokens, "wall_seconds": metrics.wall_seconds,
        "tokens_per_second": metrics.tokens_per_second, "mean_accepted_length": metrics.mean_accepted_length,
        "acceptance_rate": metrics.acceptance_rate, "drafted": metrics.drafted, "accepted": metrics.accepted,
        "target_forwards": metrics.target_forwards, "draft_seconds": metrics.draft_seconds,
        "verify_seconds": metrics.verify_seconds,
        "speedup": plain.metrics.wall_seconds / metrics.wall_seconds if metrics.wall_seconds > 0 else None,
        "identical_to_plain": (difference is None) if greedy else None,
        "first_difference": difference,
        "loop": result.settings.get("loop"),  # where its steps ran: the device loop or the host loop
        # the oracle drafter (oracle.py): every draft accepted, at this run's measured step costs
        "oracle_tau": oracle.oracle_tau, "oracle_speedup": oracle.oracle_speedup,
        "oracle_wall_seconds": oracle.oracle_wall_seconds, "verify_share": oracle.verify_share,
        "accepted_lengths": oracle.accepted_lengths,  # [k]: steps that accepted k drafts
    }


# transformers' generate(), same model, same card ---------------------------------------------------------

def hf_generate(target, prompt_ids: list[int], settings: DecodeSettings, mode: str, draft=None) -> tuple[list[int],
                                                                                                         float]:
    """One transformers generate() call: "hf-generate" (plain), "hf-prompt-lookup"
    (prompt_lookup_num_tokens = gamma) or "hf-assisted" (assistant_model = the draft model, gamma
    candidate tokens). Returns (new token ids, wall seconds)."""
    model, device = target.model, target.device
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    options = dict(max_new_tokens=settings.max_new_tokens, attention_mask=torch.ones_like(input_ids),
                   pad_token_id=model.generation_config.pad_token_id or model.config.eos_token_id)
    if settings.greedy:
        options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        options.update(do_sample=True, temperature=settings.temperature, top_k=settings.top_k or None,
                       top_p=settings.top_p)
    if not settings.stop_at_eos:
        options.update(eos_token_id=None)
    if mode == "hf-prompt-lookup":
        options.update(prompt_lookup_num_tokens=settings.gamma)
    elif mode == "hf-assisted":
        if draft is None:
            raise InvalidSettingError("hf-assisted needs a draft model: pass --draft")
        options.update(assistant_model=draft.model, num_assistant_tokens=settings.gamma)
    elif mode != "hf-generate":
        raise InvalidSettingError(f"unknown transformers baseline {mode!r}; choose from {', '.join(HF_BASELINES)}")
    if settings.seed is not None:
        torch.manual_seed(settings.seed)
    start = device_clock(device)
    with torch.inference_mode():
        out = model.generate(input_ids, **options)
    return out[0, len(prompt_ids):].tolist(), device_clock(device) - start


def _hf_row(prompt: dict, mode: str, ids: list[int], seconds: float, plain) -> dict:
    difference = first_difference(ids, plain.token_ids)
    greedy = plain.settings.get("temperature", 0) == 0
    return {
        "prompt_id": prompt["prompt_id"], "category": prompt["category"], "method": mode,
        "new_tokens": len(ids), "wall_seconds": seconds, "tokens_per_second": len(ids) / seconds if seconds else 0.0,
        "mean_accepted_length": None, "acceptance_rate": None, "drafted": 0, "accepted": 0, "target_forwards": None,
        "draft_seconds": None, "verify_seconds": None,
        "speedup": plain.metrics.wall_seconds / seconds if seconds > 0 else None,
        "oracle_tau": None, "oracle_speedup": None, "oracle_wall_seconds": None, "verify_share": None,
        "accepted_lengths": None,
        "identical_to_plain": (difference is None) if greedy else None,
        "first_difference": difference if greedy else None,
    }


# summaries -----------------------------------------------------------------------------------------------

def aggregate(rows: list[dict], plain_rows: list[dict]) -> dict:
    """Pooled figures: tok/s = all tokens / all seconds; speedup = that over plain's on the same prompts."""
    ids = {r["prompt_id"] for r in rows}
    plain_rows = [r for r in plain_rows if r["prompt_id"] in ids]  # the same prompts (transformers: a subset)
    tokens = sum(r["new_tokens"] for r in rows)
    wall = sum(r["wall_seconds"] for r in rows)
    drafted = sum(r["drafted"] for r in rows)
    forwards = [r["target_forwards"] for r in rows if r["target_forwards"] is not None]
    plain_tps = sum(r["new_tokens"] for r in plain_rows) / max(1e-9, sum(r["wall_seconds"] for r in plain_rows))
    tps = tokens / wall if wall else 0.0
    identical = [r["identical_to_plain"] for r in rows if r["identical_to_plain"] is not None]
    # what a step costs: drafting, and the target's verify pass (plain: its one-token forward)
    draft_ms, verify_ms = _per_step_ms(rows, "draft_seconds"), _per_step_ms(rows, "verify_seconds")
    divergences = [r["first_difference"] for r in rows if r.get("first_difference") is not None]
    oracle_walls = [r.get("oracle_wall_seconds") for r in rows]
    oracle_wall = sum(oracle_walls) if oracle_walls and None not in oracle_walls else None
    verify = [r.get("verify_seconds") for r in rows]
    joules = [r.get("joules") for r in rows]
    return {
        "prompts": len(rows), "new_tokens": tokens, "wall_seconds": wall, "tokens_per_second": tps,
        "mean_accepted_length": tokens / max(1, sum(forwards)) if len(forwards) == len(rows) else None,
        "acceptance_rate": sum(r["accepted"] for r in rows) / drafted if drafted else None,
        "speedup": tps / plain_tps if plain_tps else None,
        # the oracle drafter over the same steps (oracle.py): tau weighted by steps, speedup pooled like speedup's
        "oracle_tau": sum(r["oracle_tau"] * r["target_forwards"] for r in rows) / max(1, sum(forwards))
        if oracle_wall is not None else None,
        "oracle_speedup": tokens / oracle_wall / plain_tps if oracle_wall and plain_tps else None,
        "verify_share": sum(verify) / wall if wall and None not in verify else None,
        "accepted_lengths": pooled_histogram([r["accepted_lengths"] for r in rows if r.get("accepted_lengths")]),
        "identical_share": sum(identical) / len(identical) if identical else None,
        "first_difference_min": min(divergences) if divergences else None,
        "first_difference_median": statistics.median(divergences) if divergences else None,
        # energy (energy.py): every row's joules over every row's tokens; None where power was not measured
        "joules_per_token": sum(joules) / tokens if tokens and joules and None not in joules else None,
        "draft_ms_per_step": draft_ms,
        "verify_ms_per_step": verify_ms,
        # c as metrics.summarize gives it: one drafted token's time over one verify pass's
        "cost_ratio": draft_ms * sum(forwards) / drafted / verify_ms if drafted and draft_ms is not None and verify_ms
        else None,
    }


def _per_step_ms(rows: list[dict], key: str) -> float | None:
    steps = sum(r["target_forwards"] or 0 for r in rows)
    if not steps or any(r.get(key) is None for r in rows):
        return None
    return 1e3 * sum(r[key] for r in rows) / steps


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


def compare_with_transformers(results: list[dict]) -> dict:
    """On the prompts transformers ran: every method's tok/s over each transformers baseline's."""
    by_method = defaultdict(dict)
    for row in results:
        by_method[row["method"]][row["prompt_id"]] = row
    out = {}
    for baseline in (m for m in HF_BASELINES if m in by_method):
        ids = set(by_method[baseline])
        base_tps = _pooled_tps(by_method[baseline].values())
        out[baseline] = {"prompts": len(ids), "tokens_per_second": base_tps, "ratio": {}}
        for method, rows in by_method.items():
            if method == baseline or not ids <= set(rows):
                continue
            tps = _pooled_tps(rows[i] for i in ids)
            out[baseline]["ratio"][method] = tps / base_tps if base_tps else None
    return out


def _pooled_tps(rows) -> float:
    rows = list(rows)
    wall = sum(r["wall_seconds"] for r in rows)
    return sum(r["new_tokens"] for r in rows) / wall if wall else 0.0


def format_table(summary: dict, comparisons: dict | None = None) -> str:
    def show(value, spec):
        return "-" if value is None else format(value, spec)

    lines = [f"{'method':<22}{'category':<16}{'n':>4}{'tau':>6}{'alpha':>7}{'tok/s':>9}{'speedup':>9}{'identical':>10}"
             f"{'draft ms':>10}{'verify ms':>10}{'verify %':>9}{'oracle tau':>11}{'oracle x':>9}"]
    for method, block in summary.items():
        for category, figures in [("overall", block["overall"]), *block["per_category"].items()]:
            lines.append(
                f"{method:<22}{category:<16}{figures['prompts']:>4}{show(figures['mean_accepted_length'], '.2f'):>6}"
                f"{show(figures['acceptance_rate'], '.2f'):>7}{figures['tokens_per_second']:>9.1f}"
                f"{show(figures['speedup'], '.2f') + 'x':>9}{show(figures['identical_share'], '.0%'):>10}"
                f"{show(figures.get('draft_ms_per_step'), '.2f'):>10}"
                f"{show(figures.get('verify_ms_per_step'), '.2f'):>10}"
                f"{show(figures.get('verify_share'), '.0%'):>9}{show(figures.get('oracle_tau'), '.2f'):>11}"
                f"{show(figures.get('oracle_speedup'), '.2f') + 'x':>9}"
            )
    for baseline, block in (comparisons or {}).items():
        ratios = ", ".join(f"{m} {r:.1f}x" for m, r in block["ratio"].items() if r is not None)
        lines.append(f"vs {baseline} ({block['prompts']} prompts, {block['tokens_per_second']:.1f} tok/s): {ratios}")
    return "\n".join(lines)


# an interrupted bench: its rows, kept as they are measured, and the run that picks them up ------------------

def rows_path(out: str) -> Path:
    """Where a bench keeps its rows while it runs (removed once `out` holds them all)."""
    return Path(f"{out}.rows.jsonl")


def finished_rows(path: Path, run: dict, expected: dict) -> tuple[list[dict], set]:
    """The rows of the prompts an earlier, interrupted bench of the same `run` (its first line) finished: every
    method in `expected[prompt_id]` measured. A prompt it was midway through is measured again (its plain
    and method runs side by side in one process); a line cut short by a kill is dropped. A file of another
    bench is refused rather than overwritten."""
    if not path.is_file():
        return [], set()
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0])["bench"] if lines else None
    except (json.JSONDecodeError, TypeError, KeyError):
        header = None
    if header != json.loads(json.dumps(run)):
        raise InvalidSettingError(f"{path} holds the rows of another bench (other prompts, methods or settings): "
                                  "give another --out, or delete the file to start afresh")
    by_prompt = defaultdict(list)
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line, cut short where the run was killed
        by_prompt[row["prompt_id"]].append(row)
    done = {pid for pid, rows in by_prompt.items() if pid in expected and {r["method"] for r in rows} >= expected[pid]}
    return [row for pid in expected if pid in done for row in by_prompt[pid]], done


def run_bench(prompts_file: str, methods: list[str], settings: DecodeSettings, out: str, target: str = "default",
              draft: str | None = None, device: str | None = None, dtype: str | None = None, chat: bool = True,
              exit_layer: int | None = None, limit: int | None = None, per_category: int | None = None,
              device_map: str | dict | None = None, max_memory: str | dict | None = None,
              draft_device: str | None = None, transformers: list[str] = (),
              transformers_per_category: int | None = 1, transformers_limit: int | None = None,
              heads: str | None = None, adaptive_lookup: str = "auto", energy: bool = False) -> dict:
    """transformers: baselines from HF_BASELINES, run on the first `transformers_per_category` prompts of
    each category (None = every prompt), at most `transformers_limit` of them spread over the categories:
    transformers' generate() is slow, and the comparison is on the prompts it ran. energy: also the joules
    every timed specviz run used on the GPUs it runs on (energy.py; null where power is not measured)."""
    from tqdm.auto import tqdm

    unknown = [m for m in methods if m.split(":")[0].split("@")[0] not in names()] + [m for m in transformers
                                                                                      if m not in HF_BASELINES]
    if unknown or not methods:
        raise InvalidSettingError(f"unknown method(s) {', '.join(unknown) or '(none)'}; choose from "
                                  f"{', '.join(names())} (and for --transformers {', '.join(HF_BASELINES)})")
    entries = {spec: parse_method(spec, settings) for spec in methods if spec != "plain"}  # spec -> (method, settings)
    if "hf-assisted" in transformers and not draft:
        raise InvalidSettingError("hf-assisted needs a draft model: pass --draft")
    prompts = load_prompts(prompts_file, limit, per_category)
    hf_subset = pick_subset(prompts, transformers_per_category, transformers_limit) if transformers else set()
    # an earlier run of this very bench, interrupted: its finished prompts are kept, not measured again
    run = {"prompts_file": str(Path(prompts_file).resolve()), "prompt_ids": [p["prompt_id"] for p in prompts],
           "methods": ["plain", *entries], "transformers": sorted(transformers),
           "transformers_prompts": sorted(hf_subset, key=str),
           "target": target, "draft": draft, "device": device, "dtype": dtype, "chat": chat, "exit_layer": exit_layer,
           "device_map": device_map, "max_memory": max_memory, "draft_device": draft_device, "heads": heads,
           "adaptive_lookup": adaptive_lookup, "energy": energy, **settings.__dict__}
    expected = {p["prompt_id"]: {"plain", *entries, *(transformers if p["prompt_id"] in hf_subset else ())}
                for p in prompts}
    path = rows_path(out)
    results, done = finished_rows(path, run, expected)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in [{"bench": run}, *results]))
    if done:
        print(f"resuming: {len(done)} of {len(prompts)} prompts already done (their rows from {path}); "
              "measuring the rest", file=sys.stderr, flush=True)
    target_model = load_model(target, device, dtype, device_map, max_memory)
    draft_model = load_draft_model(draft, target_model, draft_device or str(target_model.device),
                                   dtype) if draft else None
    encoded = {p["prompt_id"]: encode(target_model, p["prompt"], chat) for p in prompts}
    widest = max([settings.gamma, *(s.gamma for _, s in entries.values())]) + 1
    biggest_tree = max([0, *(s.tree for _, s in entries.values())])
    longest = max(len(ids) for ids in encoded.values()) + settings.max_new_tokens + max(widest, biggest_tree + 1)
    # fail on a bad method/drafter before the long run, and capture every graph before anything is timed
    length = min(longest, target_model.context_length)

    def proposer_for(method: str):
        return make_proposer(method, target_model, draft_model, exit_layer, heads=heads,
                             adaptive_lookup=adaptive_lookup)

    warm_up(target_model, widest, length, tree=biggest_tree, device_loop=True)
    for method, method_settings in entries.values():  # each method's own graphs (EAGLE's drafting: its gamma, tree)
        proposer = proposer_for(method)
        warm_up(target_model, method_settings.gamma + 1, length, [proposer], tree=method_settings.tree,
                device_loop=True)
    first = prompts[0]
    runner = None  # plain decoding's, read from its untimed run (the first of these)
    for method, method_settings in [("plain", settings), *entries.values()]:  # one untimed run each: first calls
        untimed = run_once(target_model, proposer_for(method),
                           encoded[first["prompt_id"]], method_settings, detail=False)
        if method == "plain":
            runner = untimed.settings.get("runner")
    for mode in transformers:
        hf_generate(target_model, encoded[first["prompt_id"]][:64],
                    DecodeSettings(max_new_tokens=8, gamma=settings.gamma),
                    mode, draft_model)

    meter, energy_source = energy_meter(target_model.devices + (draft_model.devices if draft_model else [])) \
        if energy else (None, None)

    def timed(proposer, method_settings, ids, text):
        """run_once, and the joules it used (None: not measured)"""
        before = meter.read() if meter else None
        result = run_once(target_model, proposer, ids, method_settings, text, detail=False)
        return result, None if meter is None else meter.read() - before

    rows_file = open(path, "a")  # row by row, so that an interrupted run keeps its rows

    def record(row: dict) -> None:
        results.append(row)
        rows_file.write(json.dumps(row) + "\n")
        rows_file.flush()

    total = len(prompts) * (len(entries) + 1) + len(hf_subset) * len(transformers)
    try:
        with tqdm(total=total, initial=len(results), desc="bench", unit="run", file=sys.stderr) as bar:
            for prompt in prompts:
                if prompt["prompt_id"] in done:
                    continue
                ids = encoded[prompt["prompt_id"]]
                # untimed: the first prefill of a prompt's length pays one-off costs (memory blocks of a new size,
                # kernel choices) that would otherwise fall on whichever timed run comes first: plain
                run_once(target_model, PlainProposer(), ids, dataclasses.replace(settings, max_new_tokens=1),
                         detail=False)
                plain, joules = timed(PlainProposer(), settings, ids, prompt["prompt"])
                record({**_row(prompt, "plain", plain, plain), "joules": joules, "token_ids": plain.token_ids})
                bar.update()
                for spec, (method, method_settings) in entries.items():
                    result, joules = timed(proposer_for(method), method_settings, ids, prompt["prompt"])
                    record({**_row(prompt, spec, result, plain), "joules": joules})
                    bar.set_postfix_str(f"{method} {results[-1]['speedup']:.2f}x")
                    bar.update()
                if prompt["prompt_id"] in hf_subset:
                    for mode in transformers:
                        new_ids, seconds = hf_generate(target_model, ids, settings, mode, draft_model)
                        record(_hf_row(prompt, mode, new_ids, seconds, plain))
                        bar.update()
    except KeyboardInterrupt:
        print(f"\nbench interrupted: the finished prompts' rows are in {path}; the same command resumes from them",
              file=sys.stderr)
        raise
    rows_file.close()
    order = {p["prompt_id"]: i for i, p in enumerate(prompts)}
    results.sort(key=lambda row: order[row["prompt_id"]])  # resumed rows came first
    if meter is not None:
        meter.close()
    summary = summarize_results(results)
    comparisons = compare_with_transformers(results)
    floor = weight_read_floor(target_model.model, target_model.device, summary["plain"]["overall"])
    report = {
        "device": device_info(target_model.device),
        "config": {"target": target, "draft": draft, "device_map": device_map, "max_memory": max_memory,
                   "target_devices": target_model.devices, "methods": ["plain", *entries], "prompts_file": prompts_file,
                   "prompts": len(prompts), "chat": chat, "exit_layer": exit_layer, "transformers": list(transformers),
                   "heads": heads, "adaptive_lookup": adaptive_lookup,
                   "transformers_prompts": sorted(hf_subset), "dtype": str(target_model.dtype).replace("torch.", ""),
                   "runner": runner, "resumed_prompts": len(done), **settings.__dict__},
        "results": results,
        "summary": summary,
        "vs_transformers": comparisons,
        "floor": floor,
        "energy": {"measured": meter is not None, "source": energy_source} if energy else None,
    }
    Path(out).write_text(json.dumps(report, indent=1))
    path.unlink()  # the report holds every row now
    print(format_table(summary, comparisons))
    print(describe_floor(floor))
    if energy:
        print(energy_lines(summary, energy_source, meter is not None))
    print(f"written to {out}", file=sys.stderr)
    return report
