"""The deploy path: every binary file the repository tracks is stored in Git LFS by .gitattributes (the Hub
refuses a plain push of binaries), and the Space's front matter pins the gradio that requirements.txt pins."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tracked_binaries() -> list[str]:
    """Tracked files git itself takes for binary (numstat shows '-' for them against the empty tree)."""
    empty_tree = subprocess.run(["git", "hash-object", "-t", "tree", "/dev/null"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
    out = subprocess.run(["git", "diff", "--numstat", empty_tree, "HEAD"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [line.split("\t", 2)[2] for line in out.splitlines() if line.startswith("-\t-\t")]


@pytest.mark.quick
def test_every_binary_file_goes_to_lfs():
    binaries = tracked_binaries()
    assert any(name.endswith(".safetensors") for name in binaries)  # the control: binaries are found
    out = subprocess.run(["git", "check-attr", "filter", "--", *binaries], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    outside = [line.split(":")[0] for line in out.splitlines() if not line.endswith(": filter: lfs")]
    assert not outside, f"binary files with no LFS rule in .gitattributes: {outside}"


@pytest.mark.quick
def test_space_front_matter_pins_the_tested_gradio():
    front = (ROOT / "README.md").read_text().split("---")[1]
    pinned = re.search(r"^gradio==(\S+)$", (ROOT / "requirements.txt").read_text(), re.MULTILINE).group(1)
    assert re.search(r"^sdk: gradio$", front, re.MULTILINE)
    assert re.search(r"^app_file: app.py$", front, re.MULTILINE)
    assert re.search(rf"^sdk_version: {re.escape(pinned)}$", front, re.MULTILINE)
