"""What a step costs, per method, from one or more bench reports (`specviz bench --out`, or the
`.rows.jsonl` an interrupted one leaves): tok/s, speedup over
plain decoding, tau, and a step's time split into drafting, the verify pass and the rest (acceptance, the
cache's moves, the step's log, the host's share: the step's wall time less the other two), in ms, with where
the steps ran (device or host loop). Several reports (halves of one run) are pooled: tokens and seconds added.

    python -m scripts.step_figures runs/part1.json runs/part2.json
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict


def pooled(rows: list[dict]) -> dict:
    steps = sum(r["target_forwards"] or 0 for r in rows)
    wall = sum(r["wall_seconds"] for r in rows)
    tokens = sum(r["new_tokens"] for r in rows)
    draft = sum(r["draft_seconds"] or 0 for r in rows)
    verify = sum(r["verify_seconds"] or 0 for r in rows)
    identical = [r["identical_to_plain"] for r in rows if r.get("identical_to_plain") is not None]
    return {"prompts": len(rows), "tok_s": tokens / wall if wall else 0.0, "tau": tokens / steps if steps else 0.0,
            "step_ms": 1e3 * wall / steps if steps else 0.0, "draft_ms": 1e3 * draft / steps if steps else 0.0,
            "verify_ms": 1e3 * verify / steps if steps else 0.0,
            "identical": sum(identical) / len(identical) if identical else None,
            "loops": sorted({r.get("loop") or "?" for r in rows})}


def report(paths: list[str]) -> None:
    by_method = defaultdict(list)
    for path in paths:  # a report, or the rows an interrupted bench left (its .rows.jsonl)
        text = open(path).read()
        rows = [json.loads(line) for line in text.splitlines() if line.strip()] if path.endswith(".jsonl") \
            else json.loads(text)["results"]
        for row in rows:
            by_method[row["method"]].append(row)
    plain = pooled(by_method["plain"])
    print(f"{'method':<24}{'n':>5}{'tok/s':>9}{'speedup':>9}{'tau':>7}{'step ms':>9}{'draft':>8}{'verify':>8}"
          f"{'rest':>7}{'same':>7}  loop")
    for method, rows in by_method.items():
        f = pooled(rows)
        rest = f["step_ms"] - f["draft_ms"] - f["verify_ms"]
        same = "-" if f["identical"] is None else f"{f['identical']:.0%}"
        print(f"{method:<24}{f['prompts']:>5}{f['tok_s']:>9.1f}{f['tok_s'] / plain['tok_s']:>8.2f}x{f['tau']:>7.2f}"
              f"{f['step_ms']:>9.3f}{f['draft_ms']:>8.3f}{f['verify_ms']:>8.3f}{rest:>7.3f}{same:>7}  "
              f"{','.join(f['loops'])}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", help="bench reports (JSON) or the .rows.jsonl of an interrupted bench")
    report(parser.parse_args(argv).reports)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
