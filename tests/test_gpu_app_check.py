"""scripts/gpu_app_check.py end to end on the CPU with the default model: it starts app.py, drives /speculate,
/run, /compare and /cost_curve through gradio_client, runs the library beside them, and reports every way's
speeds and their ratios to the library's, with the same output everywhere."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.subprocess
def test_the_app_check_compares_every_endpoint_with_the_library(tmp_path):
    pytest.importorskip("gradio_client")
    proc = subprocess.run([sys.executable, "-m", "scripts.gpu_app_check", "--out", str(tmp_path),
                           "--max-new-tokens", "12", "--repeats", "1"], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "app_check.json").read_text())
    assert result["same_output_everywhere"] and result["repeats_count"] == 1
    ratios = result["median_ratio_app_over_library"]
    assert set(ratios) == {f"{w} {k}" for w in ("speculate", "run", "compare") for k in ("spec", "plain")}
    assert all(value > 0 for value in ratios.values())
    assert {result["repeats"][0][f"{w}_tokens"] for w in ("library", "speculate", "run", "compare")} == {12}
    assert "Done" in result["cost_curve"]["status"]
    assert (tmp_path / "app.log").is_file()
