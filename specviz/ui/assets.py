"""The files under assets/ that the page reads: its stylesheet and the example prompts."""
from __future__ import annotations

import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def css() -> str:
    return (ASSETS / "specviz.css").read_text()


def examples() -> list[dict]:
    """The example prompts, each with its method and a label that says what to expect of it."""
    return json.loads((ASSETS / "example_prompts.json").read_text())


def example_prompts() -> list[str]:
    return [example["prompt"] for example in examples()]
