"""A lesson is declared once, in its own module (lesson.py's Lesson), and registered: the Learn tab, the command
line's `learn` and the saved runs all find a lesson that a test registers, and lose it when it is taken out."""
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from command_line import run_cli
from specviz import lessons
from specviz.errors import InvalidSettingError
from specviz.lessons.lesson import Lesson
from specviz.lessons.saved import load_lesson


@dataclass
class Depth:
    layers: int
    vocabulary: int


def depth(target) -> Iterator[Depth]:
    config = target.model.config
    yield Depth(config.num_hidden_layers, 0)
    yield Depth(config.num_hidden_layers, config.vocab_size)


DEPTH = Lesson(8, "depth", "How deep the target is", "Depth", "A target is a stack of layers over a vocabulary.",
               depth, lambda r: ["layers", "vocabulary"], lambda r: [[r.layers, r.vocabulary]],
               lambda r: f"The target has **{r.layers} layers**.", Depth,
               settings=dict(prompt="Name a colour.", method="ngram", gamma=2, temperature=0.0, max_new=8, seed=0))


@contextlib.contextmanager
def registered(lesson: Lesson = DEPTH):
    lessons.register(lesson)
    try:
        yield lesson
    finally:
        lessons.unregister(lesson.key)


def test_every_shipped_lesson_is_its_modules_declaration():
    modules = (lessons.steps, lessons.exactness, lessons.forward_cost, lessons.speedup, lessons.batch_size,
               lessons.drafters, lessons.bugs)
    assert lessons.LESSONS == [module.LESSON for module in modules]
    assert [lesson.number for lesson in lessons.LESSONS] == list(range(1, 8))
    assert lessons.SETTINGS == {lesson.key: lesson.settings for lesson in lessons.LESSONS if lesson.settings}


def test_a_registered_lesson_runs_from_the_command_line_and_saves_a_run_the_tab_reads(tmp_path):
    with registered():
        assert lessons.lessons_to_run("8") == [DEPTH] and lessons.SETTINGS["depth"]["prompt"] == "Name a colour."
        done = run_cli("learn", "8", "--out", tmp_path, "--json", tmp_path / "all.json")
        assert done.returncode == 0, done.stderr
        assert "8 · How deep the target is" in done.stdout and "The target has 30 layers." in done.stdout
        assert "Prompt, sent as a chat turn: “Name a colour.”." in done.stdout
        saved = load_lesson((tmp_path / "lesson-8-depth.json").read_text())
        assert saved.lesson is DEPTH and saved.record == Depth(30, 49152)
        assert json.loads((tmp_path / "all.json").read_text())["lessons"][0]["key"] == "depth"
    # the control: taken out, the same command is refused before any model loads, and the lesson is gone
    refused = run_cli("learn", "8")
    assert refused.returncode != 0 and "no lesson '8'" in refused.stderr
    assert "depth" not in lessons.SETTINGS and all(lesson.key != "depth" for lesson in lessons.LESSONS)


def test_the_learn_tab_shows_a_registered_lesson_with_the_catalogues_table():
    from specviz.ui.app import build_demo

    def learn_ids() -> set[str]:
        config = build_demo().get_config_file()
        return {c.get("props", {}).get("elem_id") for c in config["components"]}

    with registered():
        ids = learn_ids()
        assert {"sv-learn-depth", "sv-learn-depth-stop", "sv-learn-depth-sentence", "sv-learn-depth-link"} <= ids
    assert "sv-learn-depth" not in learn_ids()  # the control: built without it


def test_a_lesson_whose_number_or_key_is_taken_is_refused():
    with registered():
        with pytest.raises(InvalidSettingError, match="has that number or key already"):
            lessons.register(DEPTH)
    with pytest.raises(InvalidSettingError, match="has that number or key already"):
        lessons.register(lessons.steps.LESSON)
    with pytest.raises(InvalidSettingError, match="takes a specviz.lessons.Lesson"):
        lessons.register("depth")


def test_the_lesson_endpoint_runs_a_shipped_lesson_and_a_registered_one(app_url):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    mechanic = client.predict(lesson="1", api_name="/lesson")
    assert mechanic["key"] == "mechanic" and mechanic["headers"] == lessons.steps.HEADERS and mechanic["rows"]
    assert "tokens per forward" in mechanic["sentence"]
    with registered():
        answer = client.predict(lesson="depth", api_name="/lesson")
        assert answer["title"] == DEPTH.title and answer["rows"] == [[30, 49152]]
        assert answer["sentence"] == "The target has **30 layers**." and answer["record"]["vocabulary"] == 49152
    with pytest.raises(Exception, match="no lesson 'depth'"):  # the control: taken out, it is refused by name
        client.predict(lesson="depth", api_name="/lesson")
