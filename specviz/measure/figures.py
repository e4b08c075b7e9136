"""The figures specviz states about itself, in one place: README's headline table, docs/performance.md's and the
lessons all read them from here (the docs' tables are written by `python -m specviz.measure.figures`, and
tests/test_figures.py checks that they are), so a new measurement changes this file and nothing else.

Each figure names its run: the device, the prompts, the commit and the date, and its journal entry under
docs/benchmarks/. A figure that run did not keep is None (shown as "–"), never one from another run. The figures
and their dates sit in code, not only in docs/, because the app and the lessons state them at run time; how each
run was made (commands, raw results) stays in its journal entry.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

H200_EXACT = "one H200, bfloat16, 256 new tokens, exact mode"
ALL_480 = "all 480 of Spec-Bench"


@dataclass(frozen=True)
class Figure:
    method: str  # bench's METHOD:GAMMA:TREE
    label: str  # how the table names it, the method in backticks
    speedup: float  # over specviz's plain decoding in the same run
    plain_tps: float  # plain decoding's tokens per second in that run
    tau: float | None  # tokens per target forward; None: the run did not keep it
    equal: str  # how many outputs equal plain decoding's
    where: str  # device, dtype, length, mode
    prompts: str
    commit: str
    date: str
    entry: str  # the run's journal entry (docs/benchmarks/)
    tok_s: float | None = None  # the method's tokens per second where the run kept it

    def speed_text(self) -> str:
        """The speedup, with plain's and the method's tokens a second where known ("about": from the speedup)."""
        if not self.plain_tps:
            return f"{self.speedup:.2f}x"
        method = _tps(self.tok_s) if self.tok_s else f"about {_tps(self.plain_tps * self.speedup)}"
        return f"{self.speedup:.2f}x ({_tps(self.plain_tps)} → {method} tok/s)"


EXACT_2B987F2 = "2026-12-01-2b987f2-the-exact-mode-s-final-version-over-all-480-prompts.md"
DFLASH_E68AE57 = "2026-12-03-e68ae57-dflash-trained-on-prompted-answers.md"

HEADLINE = [  # the current figures: the newest run of each, on the final code of its time
    Figure("retrieval:16:31", "`retrieval:16:31` (device loop)", 2.46, 1007, 3.28, "480 of 480 in bfloat16",
           H200_EXACT, ALL_480, "e68ae57", "2026-12-03", DFLASH_E68AE57, tok_s=2482),
    Figure("eagle:6:31", "`eagle:6:31`, EAGLE's tree (device loop)", 1.38, 1007, 2.85, "480 of 480 in bfloat16",
           H200_EXACT, ALL_480, "e68ae57", "2026-12-03", DFLASH_E68AE57, tok_s=1387),
    Figure("medusa:4", "`medusa:4` (device loop)", 1.29, 1011, None, "480 of 480 in bfloat16",
           H200_EXACT, ALL_480, "2b987f2", "2026-12-01", EXACT_2B987F2),
    Figure("dflash:15", "`dflash:15`, DFlash's block (device loop)", 1.37, 1007, 1.80, "480 of 480 in bfloat16",
           H200_EXACT, ALL_480, "e68ae57", "2026-12-03", DFLASH_E68AE57, tok_s=1376),
    Figure("draft:4@0.5", "`draft:4@0.5`, the distilled draft model (device loop)", 1.17, 1011, None,
           "480 of 480 in bfloat16", H200_EXACT, ALL_480, "2b987f2", "2026-12-01", EXACT_2B987F2),
    Figure("adaptive:4", "`adaptive:4` (host loop)", 2.17, 0, 2.20, "26 of 26",
           "this project's 2-core CPU, float32, 256 new tokens", "2 a category (26)", "b308598", "2026-11-27",
           "2026-11-27-b308598-cpu-the-cpu-goals-checked-again.md"),
]

# figures the lessons quote that are not in the headline table
HOST_LOOP_NGRAM = Figure("ngram:8", "`ngram:8` (host loop)", 2.02, 988, 2.24, "see its entry",
                         "one H200, bfloat16, 256 new tokens", ALL_480, "68e964c", "2026-11-28",
                         "2026-11-28-68e964c-every-drafter-over-all-480-on-an-h200.md")
GPU_VERIFY_RATIO = 1.08  # lesson 3 on an H100: a forward of 16 positions against one of 1 (docs/performance.md)


def headline(method: str) -> Figure | None:
    return next((f for f in HEADLINE if f.method == method), None)


def _tps(value: float) -> str:
    return f"{value:,.0f}"


def headline_table(figures: list[Figure] = HEADLINE) -> str:
    """README's and docs/performance.md's headline table (markdown), one row a figure."""
    rows = ["| where | prompts | method | speedup over specviz plain | tau | output equal to plain | run |",
            "| --- | --- | --- | ---: | ---: | --- | --- |"]
    for f in figures:
        speed = f.speed_text()
        tau = "–" if f.tau is None else f"{f.tau:.2f}"
        rows.append(f"| {f.where} | {f.prompts} | {f.label} | {speed} | {tau} | {f.equal} | {f.commit}, {f.date} |")
    return "\n".join(rows)


BEGIN, END = "<!-- figures: specviz/measure/figures.py -->", "<!-- /figures -->"


def block(text: str) -> str | None:
    """What a document holds between the markers (None: no markers)."""
    match = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return match.group(1).rstrip("\n") if match else None


def written(text: str, table: str | None = None) -> str:
    """The document with its block replaced by the current table."""
    table = headline_table() if table is None else table
    return re.sub(re.escape(BEGIN) + r"\n.*?" + re.escape(END), lambda _: f"{BEGIN}\n{table}\n{END}", text, flags=re.S)


DOCUMENTS = ("README.md", "docs/performance.md")


def main() -> int:
    root = Path(__file__).resolve().parents[2]
    for name in DOCUMENTS:
        path = root / name
        path.write_text(written(path.read_text()))
        print(f"wrote the headline table into {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
