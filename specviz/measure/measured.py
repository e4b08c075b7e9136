"""The drafters' figures measured on Spec-Bench, as the app's Compare tab shows them beside its one-prompt runs.

scripts/measured_drafters.py builds the shipped file from bench reports (`specviz bench --out`); the app reads
it back. Every figure is pooled over a run's prompts the way the bench pools them (bench.aggregate)."""
from __future__ import annotations

import json
from pathlib import Path

from .bench import summarize_results

MEASURED = Path(__file__).resolve().parents[2] / "assets" / "measured" / "drafters-on-spec-bench.json"


def measured_run(label: str, doc: str, reports: list[dict]) -> dict:
    """One run (bench reports of the same settings, e.g. the halves of a long run) as the Compare tab's table:
    per method tok/s, speedup over plain, tau, alpha and c."""
    config = reports[0]["config"]
    rows = [row for report in reports for row in report["results"]]
    summary = summarize_results(rows)
    methods = []
    for method in config["methods"]:
        overall = summary[method]["overall"]
        methods.append({"method": method, "tokens_per_second": overall["tokens_per_second"],
                        "speedup": overall["speedup"], "tau": overall["mean_accepted_length"],
                        "alpha": overall["acceptance_rate"], "cost": overall["cost_ratio"]})
    return {"label": label, "doc": doc, "device": reports[0]["device"]["name"], "dtype": config["dtype"],
            "prompts": len({row["prompt_id"] for row in rows}), "max_new_tokens": config["max_new_tokens"],
            "methods": methods}


def load_measured(path: Path = MEASURED) -> list[dict]:
    """The shipped runs; none when the file is missing (a checkout without assets)."""
    if not path.is_file():
        return []
    return json.loads(path.read_text())["runs"]
