"""The package's metadata (pyproject.toml): its pins are requirements.txt's, and its `specviz` command is the CLI's
entry point."""
import importlib
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pins(lines) -> dict[str, str]:
    """name -> version of every `name==version` requirement (comments and other lines skipped)."""
    found = {}
    for line in lines:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)==([^\s;#]+)\s*(#.*)?", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def differences(package: dict[str, str], pinned: dict[str, str]) -> list[str]:
    """The packages that pyproject.toml pins otherwise than requirements.txt, or that requirements.txt lacks."""
    return sorted(name for name, version in package.items() if pinned.get(name) != version)


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.quick
def test_the_package_pins_what_requirements_pin():
    meta = project()
    package = pins(meta["dependencies"] + meta["optional-dependencies"]["app"])
    pinned = pins((ROOT / "requirements.txt").read_text().splitlines())
    assert {"torch", "transformers", "gradio", "plotly"} <= set(package)
    assert differences(package, pinned) == []
    dev = pins(meta["optional-dependencies"]["dev"])
    assert differences(dev, pins((ROOT / "requirements-dev.txt").read_text().splitlines())) == []


@pytest.mark.quick
def test_a_pin_that_drifts_is_caught():
    """The control: a version that differs, or a package requirements.txt lacks, is reported."""
    pinned = {"torch": "2.13.0", "numpy": "2.4.6"}
    assert differences({"torch": "2.13.0", "numpy": "2.4.6"}, pinned) == []
    assert differences({"torch": "2.14.0", "numpy": "2.4.6", "scipy": "1.0"}, pinned) == ["scipy", "torch"]


@pytest.mark.quick
def test_the_specviz_command_is_the_cli_entry_point():
    module, _, name = project()["scripts"]["specviz"].partition(":")
    main = getattr(importlib.import_module(module), name)
    from specviz.cli import main as cli_main

    assert main is cli_main
    with pytest.raises(SystemExit) as exit_code:
        main(["--help"])
    assert exit_code.value.code == 0


def test_the_engine_needs_no_ui_package():
    """The engine's dependencies leave out gradio and plotly (a GPU machine runs the library without them);
    they are the app extra's."""
    meta = project()
    engine = pins(meta["dependencies"])
    assert "gradio" not in engine and "plotly" not in engine
    assert set(pins(meta["optional-dependencies"]["app"])) == {"gradio", "plotly"}
