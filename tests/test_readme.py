"""What README.md tells a newcomer holds: the quick subset's size, the options it names exist, its figures are the
ones the app shows, and setup says what it is doing."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


@pytest.mark.subprocess
def test_the_quick_subset_is_the_size_readme_says():
    stated = int(re.search(r"-m quick` runs .*?\(about (\d+) tests\)", README, re.S).group(1))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "quick", "--collect-only", "-q", "-p",
                           "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    collected = int(re.search(r"(\d+)/\d+ tests collected", proc.stdout).group(1))
    assert abs(collected - stated) <= 0.2 * stated, (collected, stated)


def test_the_options_readme_names_exist():
    from specviz.cli import build_parser

    assert "--steps" in README and "--port 8080" in README and "--host 0.0.0.0" in README
    args = build_parser().parse_args(["generate", "--prompt", "x", "--steps"])
    assert args.steps
    learn = build_parser().parse_args(["learn", "3", "--json", "a.json", "--out", "d"])
    assert (learn.json, learn.out) == ("a.json", "d")
    import importlib.util

    spec = importlib.util.spec_from_file_location("app", ROOT / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)

    assert app.options(["--port", "8080", "--host", "0.0.0.0"]).port == 8080


def draft_stop_figures(readme: str) -> tuple[str, str]:
    """The distilled drafter's speedups README states for gamma 4 without and with the draft stop of 0.5."""
    match = re.search(r"drafter at γ = 4 goes from (\d+\.\d\d)x to (\d+\.\d\d)x plain with a stop of 0\.5", readme)
    return match.groups() if match else ("?", "?")


def measured(run_label_start: str, method: str) -> str:
    """A method's speedup in the Compare tab's table (assets/measured/), as README writes it."""
    from specviz.measure.measured import load_measured

    run = next(run for run in load_measured() if run["label"].startswith(run_label_start))
    return f"{next(m['speedup'] for m in run['methods'] if m['method'] == method):.2f}"


@pytest.mark.quick
def test_the_draft_stop_figures_are_the_compare_tabs():
    """README quotes the run the app's Compare tab reads, not another run of the same drafter."""
    tab = (measured("2-core CPU", "draft:4"), measured("2-core CPU", "draft:4@0.5"))
    assert draft_stop_figures(README) == tab
    # the control: figures of another run (the draft-stop benchmark's own, 1.23x and 1.35x) are caught
    other = README.replace(f"goes from {tab[0]}x to {tab[1]}x", "goes from 1.23x to 1.35x")
    assert draft_stop_figures(other) != tab


def loop_named(label: str) -> bool:
    return "host loop" in label or "device loop" in label


@pytest.mark.quick
def test_every_drafter_figure_says_which_loop_it_ran_on():
    """EAGLE's tree on an H200 is 1.13x on the host loop and 1.38x on the device loop: the Compare tab's table and
    README each say which loop a figure is from."""
    from specviz.measure.measured import load_measured

    assert all(loop_named(run["label"]) for run in load_measured())
    assert not loop_named("one H200, bfloat16, all 480 prompts, 256 new tokens")  # the control: the old label
    host = measured("one H200", "eagle:6:31")
    assert f"EAGLE's tree (`eagle:6:31`) {host}x" in README
    assert re.search(r"drafting on the host loop \(the\s+run the Compare tab's H200 table shows", README)
    assert re.search(r"\| `eagle:6:31`, EAGLE's tree \(device loop\) \| 1\.38x", README)


def silent_installs(script: str) -> list[str]:
    """The install commands of a setup script that no progress line (`step "..."`) announces."""
    silent, announced = [], False
    for line in script.splitlines():
        line = line.strip()
        if line.startswith("step "):
            announced = True
        elif ("$PIP install" in line and "--upgrade pip" not in line) or line.startswith("apt-get"):
            if not announced:
                silent.append(line)
            announced = False
    return silent


@pytest.mark.quick
def test_setup_says_what_it_is_doing_and_how_long_it_takes():
    script = (ROOT / "setup.sh").read_text()
    assert silent_installs(script) == []
    # control
    assert silent_installs("$PIP install -q -r requirements.txt\n") == ["$PIP install -q -r requirements.txt"]
    minutes = re.search(r"Setup takes about (\d+) minutes on 2 cores", README).group(1)
    assert f"About {minutes} minutes on a 2-core machine" in script
    assert "--mcp" in script and (ROOT / "requirements-mcp.txt").is_file()


@pytest.mark.quick
def test_readme_s_headline_table_is_the_one_docs_performance_states():
    """Both are written from specviz.measure.figures (tests/test_figures.py checks the writing)."""
    from specviz.measure.figures import block

    performance = (ROOT / "docs" / "performance.md").read_text()
    assert block(README) is not None and block(README) == block(performance)
    assert block(README.replace("| 2.46x", "| 2.64x", 1)) != block(performance)  # the control: one changed is caught
