"""`python -m specviz learn`: a lesson run from the command line prints its claim, its measured figures as a table
and the sentence that quotes them; a lesson that does not exist is bad input (exit code 2, one line)."""
import json
import re

import pytest

from specviz.cli import EXIT_BAD_INPUT, main, text_table


@pytest.mark.quick
def test_text_table_pads_columns_and_puts_numbers_right():
    table = text_table(["method", "τ", "note"], [["ngram", 1.5, "a"], ["eagle", 12.25, "longer"]]).splitlines()
    assert table[0] == "method      τ  note"
    assert table[2] == "ngram     1.5  a"  # a number to the right, a word to the left, no trailing spaces
    assert table[3] == "eagle   12.25  longer"
    assert table[1] == "------  -----  ------"


def test_learn_one_lesson_prints_the_measured_figure(default_target, tmp_path, capsys):
    out = tmp_path / "lesson.json"
    assert main(["learn", "1", "--device", "cpu", "--dtype", "float32", "--json", str(out)]) == 0
    printed = capsys.readouterr()
    record = json.loads(out.read_text())["lessons"][0]["record"]
    assert "Claim: A drafter guesses a few tokens" in printed.out
    measured = next(line for line in printed.out.splitlines() if line.startswith("Measured: "))
    forwards, per = re.search(r"(\d+) forwards of the target wrote \d+ tokens: ([\d.]+) tokens per forward",
                              measured).groups()
    assert float(per) == pytest.approx(record["tokens_per_forward"], abs=0.005)
    assert int(forwards) == record["forwards"] == len(record["steps"])
    assert "**" not in measured  # the tab's markdown emphasis is the tab's
    assert "lesson 1" in printed.err and "lesson 1" not in printed.out  # progress goes to stderr


def test_learn_a_lesson_that_does_not_exist_is_bad_input(capsys):
    assert main(["learn", "8"]) == EXIT_BAD_INPUT
    printed = capsys.readouterr()
    assert printed.err.strip() == "specviz: error: no lesson '8': choose 1 to 7, or all"
    assert printed.out == ""  # nothing ran


def test_learn_refuses_a_place_it_cannot_write_before_measuring(capsys, tmp_path):
    assert main(["learn", "3", "--json", "/no/such/dir/x.json"]) == EXIT_BAD_INPUT
    printed = capsys.readouterr()
    assert printed.err.startswith("specviz: error: cannot write /no/such/dir/x.json: there is no folder /no/such/dir")
    assert len(printed.err.strip().splitlines()) == 1 and printed.out == ""  # nothing ran
    (tmp_path / "file").write_text("")
    assert main(["learn", "3", "--out", str(tmp_path / "file" / "inside")]) == EXIT_BAD_INPUT
    assert "cannot write to" in capsys.readouterr().err


def test_the_file_of_json_opens_in_the_learn_tab(tmp_path, capsys):
    from specviz.lessons.saved import load_lessons
    from specviz.models.testing import save_tiny_model
    from specviz.ui.learn_saved import read_saved

    folder = save_tiny_model(tmp_path / "tiny")
    out = tmp_path / "lessons.json"
    assert main(["learn", "3", "--target", folder, "--device", "cpu", "--dtype", "float32", "--json", str(out)]) == 0
    assert "Open a saved run" in capsys.readouterr().err
    (saved,) = load_lessons(out.read_text(), "lessons.json")
    assert saved.lesson.key == "cost" and saved.measured["model"] == folder
    found, errors = read_saved([str(out)])
    assert list(found) == ["cost"] and errors == []
    data = json.loads(out.read_text())
    assert data["lessons"][0]["record"]["points"] and data["lessons"][0]["headers"]  # the figures are there too
