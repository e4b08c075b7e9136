"""results/ holds the raw results the docs cite, and no more than a clone should carry: at most 5 MB in all, and
every folder in it named by a page of docs/ (or README.md). The control: a made-up folder, too big and cited
nowhere, is caught on both counts."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MOST_BYTES = 5 * 10 ** 6

pytestmark = pytest.mark.quick


def size_of(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def uncited(folder: Path, docs_text: str) -> list[str]:
    """The folders under `folder` that no page names (as results/NAME)."""
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and f"results/{d.name}" not in docs_text)


def docs_text() -> str:
    pages = [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    return "\n".join(page.read_text() for page in pages)


def test_results_stay_within_five_megabytes():
    assert size_of(ROOT / "results") <= MOST_BYTES, f"results/ holds {size_of(ROOT / 'results') / 1e6:.1f} MB"


def test_every_results_folder_is_cited():
    assert uncited(ROOT / "results", docs_text()) == []


def test_a_big_uncited_folder_is_caught(tmp_path):
    big = tmp_path / "2026-01-01-cpu-nothing"
    big.mkdir()
    (big / "rows.json").write_bytes(b"0" * (MOST_BYTES + 1))
    assert size_of(tmp_path) > MOST_BYTES
    assert uncited(tmp_path, docs_text()) == ["2026-01-01-cpu-nothing"]
