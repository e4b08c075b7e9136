"""scripts.gpu_suite: every suite's commands pass their tools' own argument checks (specviz's command line, a
script's parser, the test files named), so that a suite never wastes a GPU call on a typo; a bad entry is refused
before anything runs; --dry-run prints the commands, with the command line's overrides applied."""
import dataclasses

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
