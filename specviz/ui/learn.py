"""The Learn tab: short lessons, each a claim, a measurement made now on this machine's model (specviz.lessons),
and one sentence on what it showed. Its sub-tabs, their titles and order, and what the page says of them come
from specviz.lessons.catalogue: a lesson with widgets of its own has its builder here (LearnTab.OWN_WIDGETS),
any other gets its table and sentence. The widgets' values are learn_figures.py's, the runs learn_runs.py's."""
from __future__ import annotations

import functools
import itertools

import gradio as gr

from .. import lessons
from ..errors import SpecvizError
from ..lessons import (acceptance_rows, acceptance_sentence, distribution_sentence, mechanic_rows, mechanic_sentence,
                       side_by_side_sentence, verify_cost_sentence)
from ..lessons import catalogue
from ..lessons.catalogue import Lesson
from ..service import serving
from . import render
from .batch_tab import BatchTab, batch_lesson_figure
from .endpoint import form_handler
from .form import read_form
from .learn_figures import (ACCEPTANCE_HEADERS, ACCEPTANCE_WIDTHS, bugs_figure, distribution_figure, mechanic_html,
                            sentence_text, side_by_side_html, unchanged_widgets, verify_cost_figure, what_if_figure)
from ..service.calls import exact_records
from .learn_runs import stream_lesson
from .learn_saved import read_saved, saved_status_html, saved_summary_html
from .readouts import plot
from .run_tab import RUN_TAB
from .tabs import stop_tab

NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def tab_title(lesson: Lesson) -> str:
    """A lesson's number and short title, as the tab bar and the picker name it."""
    return f"{lesson.number} · {lesson.short}"


def lesson_heading(lesson: Lesson) -> str:
    """A lesson's number and full title, at the head of its tab."""
    return f"{lesson.number} · {lesson.title}"


def numbered(group: list[Lesson]) -> str:
    """Consecutive lessons by their numbers: "lesson N", "lessons N and M", "lessons N to M"."""
    first, last = group[0].number, group[-1].number
    if len(group) == 1:
        return f"lesson {first}"
    return f"lessons {first} and {last}" if len(group) == 2 else f"lessons {first} to {last}"


def durations_text(listed: list[Lesson]) -> str:
    """How long the lessons take on a quiet 2-core CPU (Lesson.minutes), consecutive lessons of one duration said
    together: "lessons N to M each take under a minute, lesson K about two"."""
    parts = []
    for minutes, group in itertools.groupby(listed, key=lambda lesson: lesson.minutes):
        group = list(group)
        first = not parts
        verb = ("each take " if len(group) > 1 else "takes ") if first else ""
        words = NUMBER_WORDS[minutes] if minutes < len(NUMBER_WORDS) else str(minutes)
        time = "under a minute" if minutes <= 1 else f"about {words}" + (" minutes" if first else "")
        parts.append(f"{numbered(group)} {verb}{time}")
    return ", ".join(parts)


def intro_text(listed: list[Lesson]) -> str:
    return ("Short lessons, each a claim, a measurement made now on this machine and model, and one sentence on what "
            f"it showed. On a quiet 2-core CPU {durations_text(listed)}; a machine busy with other work takes several "
            "times as long. While one runs, its status line counts what is done and estimates the time left.")


class LearnTab:
    """The lessons of specviz.lessons.catalogue, a sub-tab each."""

    def build(self, target, run_fields: list, engine: dict, batch_prompts: list[str],
              tabs: gr.Tabs | None = None) -> list:
        """target: the Run tab's target; run_fields: its prompt, method, gamma, temperature, max new tokens, seed
        (what "Open in the Run tab" fills in); batch_prompts: what the batch lesson decodes in batches; tabs: the
        app's gr.Tabs, whose tab RUN_TAB "Open in the Run tab" selects (None: it fills the fields in only).
        Returns the lessons' events, for the Run tab's Stop to cancel."""
        self.target, self.run_fields, self.engine, self.tabs = target, run_fields, engine, tabs
        self.batch_prompts = batch_prompts
        self.events = []
        self.saved_draws = {}  # lesson key -> (draw(record, what-if sliders) -> {widget: value}, status, widgets)
        listed = list(catalogue.LESSONS)
        gr.Markdown(intro_text(listed))
        with gr.Accordion("Open a saved run (measured elsewhere, for instance on a GPU)", open=False):
            gr.Markdown("`python -m specviz learn all --out DIR` measures every lesson on the machine it runs on and "
                        "writes one `lesson-N-KEY.json` a lesson; open one or several here to draw them as a live run "
                        "would, each marked with the device, date and commit it was measured on.")
            saved = gr.File(label="Open a saved run (lesson JSON files)", file_count="multiple", file_types=[".json"],
                            elem_id="sv-learn-saved")
            saved_status = gr.HTML(elem_id="sv-learn-saved-status")
        self.saved_status = saved_status
        # short tab titles (the lesson's full title heads it), so that every lesson's fits a 1280 px bar; a
        # phone's bar shows two or three, so the picker above lists them all (assets/specviz.css shows it there)
        picker = gr.Radio([(tab_title(lesson), lesson.key) for lesson in listed], value=listed[0].key,
                          show_label=False, container=False, elem_id="sv-learn-pick")
        with gr.Tabs(elem_id="sv-lessons") as lesson_tabs:
            for lesson in listed:
                with gr.Tab(tab_title(lesson), id=lesson.key):
                    self.OWN_WIDGETS.get(lesson.key, LearnTab._table)(self, lesson)
        keys = [lesson.key for lesson in listed]

        def picked(event: gr.SelectData) -> str:
            """The lesson picker follows a tab chosen in the bar."""
            return keys[event.index]

        picker.change(lambda key: gr.Tabs(selected=key), [picker], [lesson_tabs], api_visibility="private",
                      concurrency_limit=None, show_progress="hidden")
        lesson_tabs.select(picked, None, [picker], api_visibility="private", concurrency_limit=None,
                           show_progress="hidden")
        drawn = dict.fromkeys(w for _, status, widgets in self.saved_draws.values() for w in (status, *widgets))
        saved.upload(self.on_saved, [saved, *self.what_if_inputs], [saved_status, *drawn], api_visibility="private",
                     concurrency_limit=None)
        return self.events

    def on_saved(self, paths, alpha, gamma, c):
        """Draws each opened lesson with the functions a live run uses, its status saying where it was measured."""
        try:  # the what-if sliders' values, read at the boundary as every handler's are
            form = read_form({"alpha": alpha, "what_if_gamma": gamma, "cost": c}, serving.profile())
        except SpecvizError as error:
            return {self.saved_status: render.status_html(str(error), "error")}
        found, errors = read_saved(paths)
        if not found and not errors:
            return {}
        out = {self.saved_status: saved_summary_html(found, errors)}
        for key, saved in found.items():
            draw, status, _ = self.saved_draws[key]
            sentence = saved.lesson.sentence(saved.record) if key == "batch" else ""
            out |= draw(saved.record,
                        (form.alpha, form.what_if_gamma, form.cost)) | {status: saved_status_html(saved, sentence)}
        return out

    # layout shared by every lesson
    def _frame(self, lesson: Lesson):
        key = lesson.key
        gr.Markdown(f"**{lesson_heading(lesson)}.** {lesson.claim}\n\n{catalogue.prompt_line(lesson)}")
        settings = catalogue.SETTINGS.get(key)  # a lesson without settings has nothing to open in the Run tab
        with gr.Row():
            run = gr.Button("Run lesson", variant="primary", elem_id=f"sv-learn-{key}")
            stop = gr.Button("Stop", variant="stop", elem_id=f"sv-learn-{key}-stop")
            link = gr.Button("Open in the Run tab", elem_id=f"sv-learn-{key}-link") if settings else None
        status = gr.HTML(label=f"{key} status", elem_id=f"sv-learn-{key}-status")
        if link is not None:
            filled = link.click(lambda: [settings[k] for k in ("prompt", "method", "gamma", "temperature", "max_new",
                                                               "seed")],
                                None, self.run_fields, api_visibility="private", concurrency_limit=None)
            if self.tabs is not None:
                filled.then(lambda: gr.Tabs(selected=RUN_TAB), None, self.tabs, api_visibility="private",
                            concurrency_limit=None)
        return run, stop, status

    def _wire(self, run, stop, status, handler, inputs, outputs, fields=("target",), api_name=None):
        """handler(form, session, cancel) on Run lesson, over `fields` (form.FIELDS names of `inputs`, in order)."""
        naming = {"api_name": api_name} if api_name else {"api_visibility": "private"}
        guarded = form_handler(fields, handler, lambda message: {status: render.status_html(message, "error")})
        event = run.click(guarded, inputs, [status, *outputs], preprocess=False, **naming, **self.engine)
        stop.click(stop_tab, None, [status], cancels=[event], api_visibility="private", concurrency_limit=None)
        self.events.append(event)

    def _table(self, lesson: Lesson):
        """A lesson with no widgets of its own: the catalogue's table and sentence of its record."""
        run, stop, status = self._frame(lesson)
        table = gr.Dataframe(headers=lesson.headers(None), interactive=False)
        sentence = gr.Markdown(elem_id=f"sv-learn-{lesson.key}-sentence")

        def draw(r, done):
            return {table: lesson.rows(r), sentence: sentence_text(lesson.sentence, r) if done else ""}

        def handler(form, state, cancel):
            yield from stream_lesson(cancel, status, form.target, lesson.run, draw)

        self._wire(run, stop, status, handler, [self.target], [table, sentence])
        self.saved_draws[lesson.key] = (lambda r, _: draw(r, True), status, [table, sentence])

    def _mechanic(self, lesson: Lesson):
        run, stop, status = self._frame(lesson)
        view = gr.HTML(elem_id="sv-learn-mechanic-view")
        table = gr.Dataframe(headers=lessons.steps.HEADERS, interactive=False)
        sentence = gr.Markdown(elem_id="sv-learn-mechanic-sentence")

        def handler(form, state, cancel):
            yield from stream_lesson(cancel, status, form.target, lesson.run,
                                     lambda r, done: {view: mechanic_html(r), table: mechanic_rows(r),
                                                      sentence: sentence_text(mechanic_sentence, r) if done else ""})

        self._wire(run, stop, status, handler, [self.target], [view, table, sentence])
        self.saved_draws["mechanic"] = (lambda r, _: {view: mechanic_html(r), table: mechanic_rows(r),
                                                      sentence: sentence_text(mechanic_sentence, r)}, status,
                                        [view, table, sentence])

    def _exact(self, lesson: Lesson):
        run, stop, status = self._frame(lesson)
        with gr.Row():
            runs = gr.Slider(30, 300, value=150, step=10, label="seeds per histogram (more: more power, longer)",
                             elem_id="sv-learn-exact-runs")
            temperature = gr.Slider(0.3, 1.5, value=catalogue.SETTINGS["exact"]["temperature"], step=0.1,
                                    label="temperature")
        pair = gr.HTML(elem_id="sv-learn-exact-pair")
        greedy = gr.Markdown(elem_id="sv-learn-exact-greedy")
        figure = gr.Plot(label="next-token histograms", elem_id="sv-learn-exact-plot")
        sentence = gr.Markdown(elem_id="sv-learn-exact-sentence")
        gr.Markdown("The wrong verifier (`specviz.rule.wrong_verifiers.verify_sampled_without_residual`) accepts "
                    "as the real one does but, after a rejection, draws from the target's p instead of "
                    "norm(max(0, p − q)): the drafter's favourite gets a second chance. The test must catch it.")

        def handler(form, state, cancel):
            s = catalogue.SETTINGS["exact"]

            def draw(r, done):
                if isinstance(r, lessons.SideBySide):
                    return {pair: side_by_side_html(r), greedy: sentence_text(side_by_side_sentence, r)}
                return {figure: plot(distribution_figure(r)), sentence: sentence_text(distribution_sentence, r, done)}

            yield from stream_lesson(cancel, status, form.target, functools.partial(
                exact_records, prompt=s["prompt"], method=s["method"], max_new=s["max_new"], runs=form.runs,
                temperature=form.settings.temperature), draw)

        self._wire(run, stop, status, handler, [self.target, runs, temperature], [pair, greedy, figure, sentence],
                   ("target", "runs", "temperature"))

        def saved_draw(record, _):
            a, b, fig, text = unchanged_widgets(record)
            return {pair: a, greedy: b, figure: plot(fig), sentence: text}

        self.saved_draws["exact"] = (saved_draw, status, [pair, greedy, figure, sentence])

    def _cost(self, lesson: Lesson):
        run, stop, status = self._frame(lesson)
        figure = gr.Plot(label="forward time against K", elem_id="sv-learn-cost-plot")
        sentence = gr.Markdown(elem_id="sv-learn-cost-sentence")

        def handler(form, state, cancel):
            yield from stream_lesson(cancel, status, form.target, lesson.run,
                                     lambda r, done: {figure: plot(verify_cost_figure(r)),
                                                      sentence: sentence_text(verify_cost_sentence, r) if done else ""})

        self._wire(run, stop, status, handler, [self.target], [figure, sentence])
        self.saved_draws["cost"] = (lambda r, _: {figure: plot(verify_cost_figure(r)),
                                                  sentence: sentence_text(verify_cost_sentence, r)},
                                    status, [figure, sentence])

    def _acceptance(self, lesson: Lesson):
        run, stop, status = self._frame(lesson)
        table = gr.Dataframe(headers=ACCEPTANCE_HEADERS, interactive=False, wrap=True,
                             elem_id="sv-learn-acceptance-table",
                             column_widths=ACCEPTANCE_WIDTHS)  # every column in sight at 1280 px
        sentence = gr.Markdown(elem_id="sv-learn-acceptance-sentence")
        gr.Markdown("**What if.** Move α, γ and c (the drafter's time per token over the target's forward): the "
                    "curve is the expected speedup, the points are the runs measured above. The literature column "
                    "quotes the papers' own figures, measured on other targets (7B-70B where stated) on GPUs and TPUs, "
                    "not here; all of them:\n\n"
                    + "\n".join(f"- {line}" for line in lessons.literature_lines())
                    + "\n\nSpec-Bench's leaderboard (Vicuna-7B-v1.3; " + lessons.SPEC_BENCH_SOURCE.split(": ")[0]
                    + ") beside specviz's nearest method:\n\n"
                    + "\n".join(f"- {line}" for line in lessons.spec_bench_lines()))
        with gr.Row():
            alpha = gr.Slider(0, 0.99, value=0.7, step=0.01, label="α")
            gamma = gr.Slider(1, 12, value=4, step=1, label="γ")
            cost = gr.Slider(0, 1, value=0.05, step=0.01, label="c")
        figure = gr.Plot(label="what if", elem_id="sv-learn-acceptance-plot")
        rows = gr.State([])

        def handler(form, state, cancel):
            what_if = (form.alpha, form.what_if_gamma, form.cost)
            yield from stream_lesson(cancel, status, form.target, lesson.run,
                                     lambda r, done: {table: acceptance_rows(r), rows: r,
                                                      figure: plot(what_if_figure(r, *what_if)),
                                                      sentence: sentence_text(acceptance_sentence, r) if done else ""})

        self._wire(run, stop, status, handler, [self.target, alpha, gamma, cost], [table, rows, figure, sentence],
                   ("target", "alpha", "what_if_gamma", "cost"))
        self.what_if_inputs = [alpha, gamma, cost]
        self.saved_draws["acceptance"] = (lambda r, what_if: {table: acceptance_rows(r), rows: r,
                                                              figure: plot(what_if_figure(r, *what_if)),
                                                              sentence: sentence_text(acceptance_sentence, r)},
                                          status, [table, rows, figure, sentence])
        for slider in (alpha, gamma, cost):  # pure drawing: no engine, no queue
            slider.change(lambda r, a, g, c: plot(what_if_figure(r, a, g, c)), [rows, alpha, gamma, cost], [figure],
                          api_visibility="private", concurrency_limit=None, show_progress="hidden")

    def _batch(self, lesson: Lesson):
        """The Batch tab's view, as the lesson's own: its Run and its status line."""
        gr.Markdown(f"**{lesson_heading(lesson)}.** {lesson.claim}\n\n{catalogue.prompt_line(lesson)}")
        batch = BatchTab("sv-learn-batch", api_name=None)
        self.events.append(batch.build(self.target, self.batch_prompts, self.engine))
        self.saved_draws[lesson.key] = (lambda r, _: {batch.plot: plot(batch_lesson_figure(r))}, batch.status,
                                        [batch.plot])

    def _bugs(self, lesson: Lesson):
        run, stop, status = self._frame(lesson)
        table = gr.Dataframe(headers=lessons.bugs.HEADERS, interactive=False, wrap=True)
        figure = gr.Plot(label="first-token histograms", elem_id="sv-learn-bugs-plot")
        sentence = gr.Markdown(elem_id="sv-learn-bugs-sentence")
        gr.Markdown("Every verifier sees the same draft, q, p and random numbers on each seed; the first seeds run "
                    "through the engine, the rest replay its draws on the p and q its forward passes gave. A bug the "
                    f"test has not caught at {lessons.bugs.RUNS} seeds runs on until it is (up to 3000 seeds).")

        def draw(r, done):
            return {table: lessons.bugs.bug_rows(r), figure: plot(bugs_figure(r)),
                    sentence: lessons.bugs.bug_sentence(r) if done else ""}

        def handler(form, state, cancel):
            yield from stream_lesson(cancel, status, form.target, lesson.run, draw)

        self._wire(run, stop, status, handler, [self.target], [table, figure, sentence])
        self.saved_draws["bugs"] = (lambda r, _: draw(r, True), status, [table, figure, sentence])

    # the lessons with widgets of their own, by key; the others get _table
    OWN_WIDGETS = {"mechanic": _mechanic, "exact": _exact, "cost": _cost, "acceptance": _acceptance, "batch": _batch,
                   "bugs": _bugs}
