"""Lessons saved on one machine and drawn on another (specviz.lessons.saved, the Learn tab's "Open a saved run"):
every lesson's record, measured on the tiny random models, read back from its JSON draws exactly the widgets the
live record draws; the command line writes one complete file a lesson; a file that is not one says so."""
import json

import pytest

from specviz import lessons
from specviz.cli import main
from specviz.lessons.catalogue import LESSONS
from specviz.lessons.saved import SavedLessonError, load_lesson, measured_on, save_lesson
from specviz.models.testing import save_tiny_model
from specviz.ui import learn_figures, learn_saved
from specviz.ui.batch_tab import batch_lesson_figure

PROMPT = [1, 5, 9, 2, 7, 3]
BY_KEY = {lesson.key: lesson for lesson in LESSONS}


def widgets(key: str, record) -> list:
    """Everything the Learn tab draws from a lesson's record, through the functions a live run uses."""
    lesson = BY_KEY[key]
    drawn = [lesson.headers(record), lesson.rows(record), lesson.sentence(record)]
    extra = {"mechanic": lambda r: [learn_figures.mechanic_html(r)],
             "exact": lambda r: list(learn_figures.unchanged_widgets(r)),
             "cost": lambda r: [learn_figures.verify_cost_figure(r)],
             "acceptance": lambda r: [learn_figures.what_if_figure(r, 0.7, 4, 0.05)],
             "batch": lambda r: [batch_lesson_figure(r)],
             "drafters": lambda r: []}[key]
    return drawn + extra(record)


@pytest.fixture(scope="module")
def live_records(tiny_target):
    """One record of each lesson, measured on the tiny model with the drafters it has (no trained files)."""
    finish = lessons.finish
    return {
        "mechanic": finish(lessons.mechanic(tiny_target, PROMPT, "ngram", max_new_tokens=12)),
        "exact": finish(lessons.exactness.unchanged(tiny_target, PROMPT, "early-exit", runs=10, max_new_tokens=8)),
        "cost": finish(lessons.verify_cost(tiny_target, positions=(1, 4), context=16, repeats=1)),
        "acceptance": finish(lessons.acceptance(tiny_target, ("ngram", "early-exit"), {"numbers": PROMPT},
                                                max_new_tokens=8)),
        "batch": finish(lessons.batch_sizes(tiny_target, "ngram", sizes=(1, 2), prompts=[PROMPT, PROMPT[::-1]],
                                            max_new_tokens=6)),
        "drafters": finish(lessons.drafter_costs(tiny_target, ("ngram", "early-exit"), prompt=PROMPT,
                                                 max_new_tokens=8)),
    }


def test_every_lesson_read_back_draws_what_the_live_record_draws(live_records, tiny_target, tmp_path):
    where = measured_on(tiny_target, "tiny")
    drawn = {}
    for key, record in live_records.items():
        saved = load_lesson(save_lesson(tmp_path, BY_KEY[key], record, where, 1.0).read_text(), key)
        assert saved.lesson.key == key and saved.measured["device_type"] == "cpu"
        assert saved.measured["model"] == "tiny" and saved.measured["dtype"] == "float32"
        drawn[key] = widgets(key, saved.record)
        assert drawn[key] == widgets(key, record), key
    # control: the comparison can fail: each lesson draws something no other lesson's record draws
    assert len({json.dumps(w, sort_keys=True, default=str) for w in drawn.values()}) == len(drawn)
    cost = live_records["cost"]
    slower = lessons.VerifyCost(cost.device,
                                [lessons.CostPoint("positions", p.x, p.ms * 2, p.context) for p in cost.points],
                                cost.weight_bytes, cost.bandwidth_gbs, cost.bandwidth_source)
    assert learn_figures.verify_cost_figure(slower) != drawn["cost"][-1]


def test_the_command_line_writes_one_complete_file_a_lesson(tmp_path, capsys):
    folder = save_tiny_model(tmp_path / "tiny")
    out = tmp_path / "runs"
    for number in ("3", "6"):  # the lessons the tiny model runs without trained drafters
        assert main(["learn", number, "--target", folder, "--device", "cpu", "--dtype", "float32", "--out",
                     str(out)]) == 0
    printed = capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["lesson-3-cost.json", "lesson-6-drafters.json"]
    assert "wrote " in printed.err and "wrote " not in printed.out  # progress goes to stderr
    data = json.loads((out / "lesson-3-cost.json").read_text())
    assert data["measured"]["model"] == folder and data["measured"]["torch"] and data["measured"]["date"]
    assert data["measured"]["seconds"] >= 0 and data["measured"]["device"]
    saved = load_lesson((out / "lesson-3-cost.json").read_text())
    assert data["sentence"] == saved.lesson.sentence(saved.record) and "× the time of one" in data["sentence"]
    assert [p.x for p in saved.record.points] == [1, 2, 3, 5, 8, 12, 16]
    assert saved.label.startswith(f"measured on {data['measured']['device']}, {data['measured']['date']}, ")
    other = load_lesson((out / "lesson-6-drafters.json").read_text())
    assert other.lesson.number == 6 and lessons.drafter_rows(other.record)  # control: the other file, the other lesson


@pytest.mark.quick
def test_a_file_that_is_not_a_saved_lesson_says_what_is_wrong(tmp_path):
    good = lessons.VerifyCost("cuda (x)", [lessons.CostPoint("positions", 1, 2.0, 128),
                                           lessons.CostPoint("positions", 4, 2.5, 128)], 270_000_000, 3350.0, "spec")
    path = save_lesson(tmp_path, BY_KEY["cost"], good,
                       {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-27 22:00 UTC",
                                                         "commit": "abc1234"})
    text = path.read_text()
    assert load_lesson(text).label == "measured on NVIDIA H100 80GB HBM3, 2026-11-27 22:00 UTC, commit abc1234"
    damaged = json.loads(text)
    del damaged["record"]["points"][0]["ms"]
    wrong_version = json.loads(text) | {"version": 99}
    cases = {"{not json": "is not JSON", b"\x89PNG\r\n\x1a\n\x00": "is not JSON", "[1, 2]": "is not a saved lesson",
             json.dumps({"format": "something else"}): "is not a saved lesson",
             json.dumps(wrong_version): "version 99",
             json.dumps(json.loads(text) | {"key": "nope"}): "no lesson 'nope'",
             json.dumps(damaged): "incomplete or damaged"}
    for bad, message in cases.items():
        with pytest.raises(SavedLessonError, match=message):
            load_lesson(bad, "bad.json")
    # in the tab: the bad file is reported by name, the good one is still drawn
    (tmp_path / "bad.json").write_text("{not json")
    found, errors = learn_saved.read_saved([str(path), str(tmp_path / "bad.json"), str(tmp_path / "missing.json")])
    assert list(found) == ["cost"] and len(errors) == 2
    assert errors[0].startswith("bad.json is not JSON") and errors[1].startswith("missing.json: cannot be read")
    summary = learn_saved.saved_summary_html(found, errors)
    assert "sv-error" in summary and "NVIDIA H100 80GB HBM3" in summary and "not live" in summary
    assert "Saved run, not measured here" in learn_saved.saved_status_html(found["cost"])


@pytest.mark.quick
def test_a_damaged_lesson_5_file_says_which_figure_is_wrong(tmp_path):
    record = lessons.BatchSizes("cpu (x)", "retrieval",
                                rows=[{"method": m, "batch_size": 1, "rows": 1, "new_tokens": 32, "wall_seconds": w,
                                       "ms_per_token": 30.0, "row_forwards": f, "drafted": d, "accepted": a,
                                       "identical_rows": 1}
                                      for m, w, f, d, a in (("plain", 1.0, 32, 0, 0), ("retrieval", 0.8, 20, 40, 12))],
                                costs=[{"batch_size": 1, "ratio": 1.2}])
    text = save_lesson(tmp_path, BY_KEY["batch"], record, {"device": "cpu"}).read_text()
    assert load_lesson(text).record.summary  # the control: the file as written reads
    damaged = json.loads(text)
    damaged["record"]["rows"][0]["wall_seconds"] = 0
    with pytest.raises(SavedLessonError, match=r"record.rows\[0\].wall_seconds is 0, where a measured time"):
        load_lesson(json.dumps(damaged), "lesson-5-batch.json")
    damaged["record"]["rows"][0]["wall_seconds"] = 1.0
    damaged["record"]["costs"][0]["ratio"] = "fast"
    with pytest.raises(SavedLessonError, match=r"record.costs\[0\].ratio is 'fast'"):
        load_lesson(json.dumps(damaged), "lesson-5-batch.json")


@pytest.mark.quick
def test_a_deeply_nested_file_says_so_not_python_s_recursion_text(tmp_path):
    """Lists inside lists, deeper than Python's stack: in the JSON itself, or under a lesson's record."""
    record = "[" * 900 + "]" * 900  # parses, and is deeper than the reading of a record goes
    lesson = {"format": "specviz-lesson", "version": 1, "key": "cost", "record": json.loads(record)}
    for name, text in [("deep.json", "[" * 100_000 + "]" * 100_000), ("record.json", json.dumps(lesson))]:
        (tmp_path / name).write_text(text)
        found, errors = learn_saved.read_saved([str(tmp_path / name)])
        assert not found and len(errors) == 1, errors
        assert errors[0].startswith(name) and "recursion" not in errors[0], errors
    assert "nested too deeply" in learn_saved.read_saved([str(tmp_path / "deep.json")])[1][0]
