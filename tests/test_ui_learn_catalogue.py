"""The Learn tab reads its lessons from specviz.lessons.catalogue: its sub-tabs, their titles and order, the picker
and the times the tab quotes. A catalogue with one more entry (a lesson of one real forward pass, no widgets of its
own) gets one more sub-tab, titled and counted from the entry, whose Run lesson measures it; the stock catalogue
gives the tab as it reads today (the control)."""
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from specviz.lessons import catalogue
from specviz.ui import learn
from specviz.ui.learn_figures import sentence_text

TODAY = ["1 · Mechanic", "2 · Same output", "3 · Cost of K", "4 · Acceptance", "5 · Batch size", "6 · Drafters",
         "7 · Bugs"]
TODAY_TIMES = ("On a quiet 2-core CPU lessons 1 to 6 each take under a minute, lesson 7 about two; a machine busy "
               "with other work takes several times as long.")
PROMPT = "The capital of France is"


@dataclass
class NextToken:
    prompt: str
    token: str
    probability: float


def next_token(target):
    """A lesson's generator: the target's most likely next token after PROMPT, from one forward pass."""
    ids = torch.tensor([target.tokenizer.encode(PROMPT)], device=target.device)
    with torch.no_grad():
        p = target.model(ids).logits[0, -1].float().softmax(-1)
    yield NextToken(PROMPT, target.tokenizer.decode([int(p.argmax())]), float(p.max()))


EXTRA = catalogue.Lesson(len(catalogue.LESSONS) + 1, "next-token", "What the target writes next", "Next token",
                         "The target's next token is its most likely one.", next_token,
                         lambda r: ["prompt", "next token", "p"],
                         lambda r: [[r.prompt, r.token, round(r.probability, 3)]],
                         lambda r: f"The next token is **{r.token!r}** at p = **{r.probability:.2f}**.", NextToken,
                         minutes=3)


def build(tabs=True):
    """The Learn tab as the app builds it (tests/test_ui_learn.py's way, no browser): its Blocks and its LearnTab."""
    import gradio as gr

    with gr.Blocks() as demo:
        with gr.Tabs() as app_tabs:
            with gr.Tab("Run", id=learn.RUN_TAB):
                fields = [gr.Textbox(), gr.Textbox(), gr.Number(), gr.Number(), gr.Number(), gr.Number()]
                target = gr.Textbox()
            with gr.Tab("Learn", id="learn"):
                tab = learn.LearnTab()
                tab.build(target, fields, {}, ["a prompt"], app_tabs if tabs else None)
    return demo, tab


def by_elem_id(demo, elem_id):
    return next(block for block in demo.blocks.values() if getattr(block, "elem_id", None) == elem_id)


def shown(demo) -> tuple[list[str], list[str], str]:
    """The lessons' sub-tab titles, the picker's choices and the tab's opening text."""
    titles = [child.label for child in by_elem_id(demo, "sv-lessons").children]
    picker = [label for label, _ in by_elem_id(demo, "sv-learn-pick").choices]
    intro = next(block.value for block in demo.blocks.values()
                 if isinstance(getattr(block, "value", None), str) and block.value.startswith("Short lessons"))
    return titles, picker, intro


@pytest.mark.quick
def test_the_stock_catalogue_gives_todays_sub_tabs_and_times():
    titles, picker, intro = shown(build()[0])
    assert titles == picker == TODAY
    assert TODAY_TIMES in intro


@pytest.mark.quick
def test_one_more_catalogue_entry_is_one_more_sub_tab_titled_and_counted_from_it(monkeypatch):
    monkeypatch.setattr(catalogue, "LESSONS", [*catalogue.LESSONS, EXTRA])
    demo, tab = build()
    titles, picker, intro = shown(demo)
    assert titles == picker == [*TODAY, "8 · Next token"]
    assert "lessons 1 to 6 each take under a minute, lesson 7 about two, lesson 8 about three;" in intro
    assert TODAY_TIMES not in intro  # the control above reads today's sentence: this one is derived
    assert "**8 · What the target writes next.** The target's next token is its most likely one." in [
        block.value for block in demo.blocks.values() if isinstance(getattr(block, "value", None), str)]
    assert by_elem_id(demo, "sv-learn-next-token").value == "Run lesson"
    # it has no settings to open in the Run tab: no link, where every stock lesson with a frame has one
    links = [b for b in demo.blocks.values() if str(getattr(b, "elem_id", "")).endswith("-link")]
    assert len(links) == 6 and not any(b.elem_id == "sv-learn-next-token-link" for b in links)
    # a saved run of it draws with the catalogue's table and sentence
    draw, status, widgets = tab.saved_draws["next-token"]
    drawn = draw(NextToken("p", " Paris", 0.5), None)
    assert [drawn[w] for w in widgets] == [[["p", " Paris", 0.5]], "The next token is **' Paris'** at p = **0.50**."]


def test_the_extra_lesson_runs_from_its_run_lesson_button(default_target, monkeypatch):
    """Run lesson on the added entry measures it on the target (a real forward pass) and draws the catalogue's
    table and sentence under a status line that says it is done."""
    monkeypatch.setattr(catalogue, "LESSONS", [*catalogue.LESSONS, EXTRA])
    demo, tab = build()
    button = by_elem_id(demo, "sv-learn-next-token")
    run = next(fn for dep, fn in zip(demo.config["dependencies"], demo.fns.values())
               if [button._id, "click"] in [list(t) for t in dep["targets"]])
    frames = list(run.fn("default", request=types.SimpleNamespace(session_hash="learn-catalogue-extra")))
    last = frames[-1]
    _, status, (table, sentence) = tab.saved_draws["next-token"]
    assert "Done in" in last[status], last[status]
    expected = next(next_token(default_target))
    assert last[sentence] == sentence_text(EXTRA.sentence, expected)  # the record's text shown as text
    assert last[table] == EXTRA.rows(expected)
    assert expected.token.strip()  # a word: the check above compares a real token


def test_no_lesson_title_or_count_is_typed_in_the_ui():
    """The UI's sources name no lesson by its title and write no count of lessons: both come from the catalogue."""
    sources = "\n".join(path.read_text() for path in (Path(learn.__file__).parent).glob("*.py"))
    for lesson in catalogue.LESSONS:
        for title in (lesson.title, lesson.short):
            assert f'"{title}"' not in sources, title
    assert "Seven" not in sources and "all seven" not in sources and "1 to 6" not in sources
