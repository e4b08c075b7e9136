"""scripts/ holds only the tools a user or maintainer runs: every Python tool imports (as `python -m
scripts.NAME` runs it) and answers --help with its usage and docstring; every shell tool answers --help with its
header, before it touches the machine."""
import contextlib
import importlib
import io
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON_TOOLS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py") if p.name != "__init__.py")
SHELL_TOOLS = sorted(p.name for p in (ROOT / "scripts").glob("*.sh"))


def help_of(module) -> tuple[int | None, str]:
    """(the exit code, what it printed) of module.main(["--help"])."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            module.main(["--help"])
        except SystemExit as exit_code:
            return exit_code.code, out.getvalue()
    return None, out.getvalue()  # it ran instead of answering


def test_scripts_holds_tools_only():
    others = sorted(p.name for p in (ROOT / "scripts").iterdir()
                    if p.suffix not in (".py", ".sh") and p.name != "__pycache__")
    assert others == []
    assert {"gpu_suite.py", "stage_app_wheels.sh", "gpu_check.py", "screenshots.py"} <= set(SHELL_TOOLS) | {
        f"{name}.py" for name in PYTHON_TOOLS}


@pytest.mark.parametrize("name", PYTHON_TOOLS)
def test_every_python_tool_answers_help(name):
    module = importlib.import_module(f"scripts.{name}")
    code, printed = help_of(module)
    assert code == 0 and printed.startswith("usage: ")
    assert module.__doc__.strip().splitlines()[0] in printed  # says what it does


def test_a_tool_that_runs_on_help_is_caught():
    """The control: a main() that ignores --help is not taken for an answer."""
    class Ignores:
        @staticmethod
        def main(argv):
            print("working")

    assert help_of(Ignores) == (None, "working\n")


@pytest.mark.parametrize("name", SHELL_TOOLS)
def test_every_shell_tool_answers_help(name, tmp_path):
    path = ROOT / "scripts" / name
    done = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")})
    header = path.read_text().splitlines()
    first = next(line for line in header if line.startswith("# ")).removeprefix("# ")
    assert done.returncode == 0 and done.stdout.startswith(first)
    assert not (tmp_path / "out").exists()  # it answered before doing anything
