"""The figures specviz states about itself come from one module (specviz.measure.figures): README's and
docs/performance.md's headline tables are what it writes, so a new measurement changes that file alone."""
from dataclasses import replace
from pathlib import Path

import pytest

from specviz.measure import figures

pytestmark = pytest.mark.quick
ROOT = Path(__file__).resolve().parents[1]


def test_the_documents_hold_the_table_the_module_writes():
    for name in figures.DOCUMENTS:
        text = (ROOT / name).read_text()
        assert figures.block(text) == figures.headline_table(), f"{name}: run python -m specviz.measure.figures"
    # the control: a new measurement in the module makes the documents stale until they are written again
    moved = [replace(f, speedup=f.speedup + 0.1) if f.method == "medusa:4" else f for f in figures.HEADLINE]
    readme = (ROOT / "README.md").read_text()
    assert figures.block(readme) != figures.headline_table(moved)
    assert figures.block(figures.written(readme, figures.headline_table(moved))) == figures.headline_table(moved)


def test_every_figure_names_its_run_and_says_what_it_did_not_keep():
    for f in figures.HEADLINE:
        assert len(f.commit) == 7 and f.date.startswith("2026-") and (ROOT / "docs" / "benchmarks" / f.entry).is_file()
    assert figures.headline("medusa:4").tau is None  # that run kept no tau: shown as "–", not borrowed
    assert "| – |" in figures.headline_table() and "about 1,304" in figures.headline_table()
    assert figures.headline("retrieval:16:31").speed_text() == "2.46x (1,007 → 2,482 tok/s)"  # measured, not derived
