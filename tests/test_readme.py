"""What README.md tells a newcomer holds: the quick subset's size, and the options it names exist."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_quick_subset_is_the_size_readme_says():
    stated = int(re.search(r"-m quick` runs .*?\(about (\d+) tests\)", README, re.S).group(1))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "quick", "--collect-only", "-q", "-p", "no:cacheprovider"],
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
