"""The code passes `ruff check .` (pyproject.toml's [tool.ruff]: pyflakes and pycodestyle, lines up to 120)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.quick
def test_the_code_passes_ruff():
    if importlib.util.find_spec("ruff") is None:
        message = "ruff is not installed: pip install -r requirements-dev.txt (bash setup.sh --dev does it)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
