"""scripts.gpu_suite: every suite's commands pass their tools' own argument checks (specviz's command line, a
script's parser, the test files named), so that a suite never wastes a GPU call on a typo; a bad entry is refused
before anything runs; --dry-run prints the commands, with the command line's overrides applied."""
import dataclasses
import json

import pytest

from scripts import gpu_suite
from scripts.gpu_suite import SUITES, Step, Suite, problems

STEPS = [(name, step) for name, suite in SUITES.items() for step in suite.steps]


@pytest.mark.parametrize("name,step", STEPS, ids=[f"{name}:{step.name}" for name, step in STEPS])
def test_every_step_of_every_suite_passes_its_tools_checks(name, step):
    assert problems(step) == []


@pytest.mark.parametrize("name", SUITES)
def test_a_suites_steps_have_their_own_names(name):
    names = [step.name for step in SUITES[name].steps]
    assert len(names) == len(set(names))  # each names its log and --only picks it


@pytest.mark.parametrize("bad,said", [
    (Step("typo", "specviz", ("bench", "--prompts", "p.jsonl", "--methodz", "ngram", "--out", "x")), "--methodz"),
    (Step("method", "specviz", ("bench", "--prompts", "p.jsonl", "--methods", "ngram:99", "--out", "x")), "gamma"),
    (Step("setting", "specviz", ("check-exactness", "--method", "eagle", "--top-p", "1.5")), "top"),
    (Step("script", "scripts.graph_profile", ("--out", "x", "--metods", "eagle")), "--metods"),
    (Step("missing", "scripts.graph_profile", ("--methods", "eagle",)), "--out"),
    (Step("tool", "scripts.no_such_tool", ("--out", "x")), "no such tool"),
    (Step("tests", "pytest", ("tests/test_no_such_file.py",)), "no tests/test_no_such_file.py"),
])
def test_a_bad_entry_is_named_with_what_is_wrong(bad, said):
    """The control: each kind of mistake is caught by the same checks the suites pass."""
    found = problems(bad)
    assert len(found) == 1 and found[0].startswith(bad.name) and said in found[0]


def test_a_suite_with_a_bad_entry_is_refused_before_anything_runs(monkeypatch, tmp_path, capsys):
    good = SUITES["identity"].steps[0]
    bad = dataclasses.replace(good, name="bad", args=good.args + ("--gamma", "0"))
    monkeypatch.setitem(SUITES, "broken", Suite("a good step then a bad one", (good, bad)))
    ran = []
    monkeypatch.setattr(gpu_suite, "run_steps", lambda *a: ran.append(a) or {})
    assert gpu_suite.main(["broken", "--out", str(tmp_path / "out")]) == 2
    assert "bad (specviz bench" in capsys.readouterr().err
    assert ran == [] and not (tmp_path / "out").exists()
    assert gpu_suite.main(["identity", "--out", str(tmp_path / "out"), "--dry-run"]) == 0  # the good suite passes


def test_dry_run_prints_the_commands_with_the_overrides(capsys, tmp_path):
    out = tmp_path / "out"
    code = gpu_suite.main(["headline", "--methods", "eagle:6:31,draft:4", "--part", "2/3", "--per-category", "1",
                           "--max-new-tokens", "8", "--device", "cpu", "--out", str(out), "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and len(lines) == 2 and not out.exists()  # nothing written
    bench, figures = lines
    for piece in ("-m specviz bench", "--methods eagle:6:31,draft:4", "--per-category 1", "--max-new-tokens 8",
                  "--device cpu", f"--prompts {out}/prompts-2-of-3.jsonl", "--draft distilled",
                  f"--out {out}/headline-2of3.json"):
        assert piece in bench
    assert "256" not in bench and "retrieval:16:31" not in bench  # replaced, not added beside
    assert figures.split("  >")[0].endswith(f"-m scripts.step_figures {out}/headline-2of3.json")


def test_only_picks_steps_and_refuses_a_name_the_suite_lacks(capsys):
    assert gpu_suite.main(["exactness-device", "--only", "eagle,draft-stop", "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and "--draft-stop 0.5" in printed[1]
    assert gpu_suite.main(["exactness-device", "--only", "eagel", "--dry-run"]) == 2
    assert "no step eagel" in capsys.readouterr().err


def test_a_part_is_a_slice_of_the_prompt_file(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"n": {i}}}\n' for i in range(10)))
    parts = [gpu_suite.prompt_part(str(prompts), f"{k}/3", str(tmp_path), write=True)[0] for k in (1, 2, 3)]
    texts = [open(p).read() for p in parts]
    assert [t.count("\n") for t in texts] == [4, 4, 2] and "".join(texts) == prompts.read_text()


@pytest.mark.parametrize("argv", [["nosuch"], ["identity", "--part", "4/3"], ["identity", "--part", "1-3"]])
def test_a_bad_command_line_is_refused(argv):
    with pytest.raises(SystemExit) as exit_code:
        gpu_suite.main(argv + ["--dry-run"])
    assert exit_code.value.code == 2


def test_a_suite_runs_its_steps_in_turn_and_reports_each_exit(monkeypatch, tmp_path, capsys):
    """The runner itself, with a tool that needs no model: a step that fails (a report that is not there) is
    recorded with its exit status and its log, the next one still runs, and the suite's status says one failed."""
    missing, present = tmp_path / "none.json", tmp_path / "report.json"
    row = {"target_forwards": 4, "wall_seconds": 0.5, "new_tokens": 8, "draft_seconds": 0.1, "verify_seconds": 0.3,
           "identical_to_plain": True, "loop": "host"}
    present.write_text(json.dumps({"results": [dict(row, method="plain", target_forwards=8),
                                               dict(row, method="ngram:4")]}))
    steps = (Step("fails", "scripts.step_figures", (str(missing),)),
             Step("runs", "scripts.step_figures", (str(present),)))
    monkeypatch.setitem(SUITES, "figures", Suite("two reports", steps))
    out = tmp_path / "out"
    assert gpu_suite.main(["figures", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "summary: fails exit 1, runs exit 0" in printed
    assert "none.json" in (out / "fails.log").read_text()
    assert "runs: ngram:4" in printed and "ngram:4" in (out / "runs.log").read_text()  # printed and kept
    assert (out / "gpu.txt").read_text().strip()  # the card (or "no GPU") and the versions


def test_a_step_past_its_time_is_stopped_and_the_next_runs(monkeypatch, tmp_path, capsys):
    """A step's seconds bound it (exit 124, as timeout(1) says), so that a call keeps the steps after it."""
    hangs = tmp_path / "test_hangs.py"
    hangs.write_text("import time\n\ndef test_hangs():\n    time.sleep(600)\n")
    steps = (Step("hangs", "pytest", ("-q", "-p", "no:cacheprovider", str(hangs)), seconds=3),
             Step("after", "scripts.step_figures", (str(tmp_path / "none.json"),)))
    monkeypatch.setitem(SUITES, "hanging", Suite("a step that never ends", steps))
    assert gpu_suite.main(["hanging", "--out", str(tmp_path / "out")]) == 1
    assert "summary: hangs exit 124, after exit 1" in capsys.readouterr().out
