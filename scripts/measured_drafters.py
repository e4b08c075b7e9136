"""Writes assets/measured/drafters-on-spec-bench.json, the Spec-Bench figures the app's Compare tab shows,
from the bench reports of the runs listed below (each run's doc says its command and machine).

    python -m scripts.measured_drafters
"""
import argparse
import gzip
import json
from pathlib import Path

from specviz.measure.measured import MEASURED, measured_run

ROOT = Path(__file__).resolve().parent.parent

# label, the run's doc, its bench reports (a run too long for one call ran in parts)
RUNS = [
    ("2-core CPU, float32, 2 prompts a category (26), 128 new tokens, the host loop",
     "docs/benchmarks/2026-11-28-1f64947-every-drafter-side-by-side-on-the-2-core-cpu.md",
     ["results/2026-11-28-cpu-drafters/bench.json"]),
    ("one H200, bfloat16, all 480 prompts, 256 new tokens, the host loop (the device loop is faster: README's headline "
     "table)",
     "docs/benchmarks/2026-11-28-68e964c-every-drafter-over-all-480-on-an-h200.md",
     ["results/2026-11-28-h200-all-480-drafters/part1.json.gz",
      "results/2026-11-28-h200-all-480-drafters/part2.json.gz"]),
]


def read_text(path) -> str:
    """A results file, gzipped where it is large (results/ stays small)."""
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    runs = [measured_run(label, doc, [json.loads(read_text(ROOT / f)) for f in files])
            for label, doc, files in RUNS]
    MEASURED.parent.mkdir(parents=True, exist_ok=True)
    MEASURED.write_text(json.dumps({"source": "scripts/measured_drafters.py", "runs": runs}, indent=1) + "\n")
    print(f"wrote {MEASURED.relative_to(ROOT)}: {len(runs)} runs")


if __name__ == "__main__":
    main()
