"""The Learn tab: short lessons, each a claim, a measurement made now on this machine's model (specviz.lessons),
and one sentence on what it showed. Records become widget values through small pure functions (*_figure and
*_html here; *_rows and *_sentence are the lessons' own, shared with the command line), so that tests can check
them without a browser; LearnTab wires them to buttons."""
from __future__ import annotations

import dataclasses
import functools
import html
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator

import gradio as gr

from .. import lessons
from .. import methods as registry
from ..errors import SpecvizError
from ..lessons import (acceptance_rows, acceptance_sentence, distribution_sentence, drafter_rows, drafter_sentence,  # noqa: F401
                       mechanic_rows, mechanic_sentence, side_by_side_sentence, verify_cost_sentence)
from ..lessons.catalogue import plain as plain_record
from ..lessons.common import megabytes as _mb
from ..lessons.progress import Progress, left_text, progress_of, time_left
from ..lessons.saved import SavedLesson, SavedLessonError, load_lessons
from ..models.loading import DEFAULT_MODEL
from ..rule.theory import expected_speedup
from . import charts, live, render
from .endpoint import charge_of, form_handler, pull, stopped_message
from .form import message_of, read_form
from .gpu import gpu
from .live import ENGINE_LOCK, encode_prompt, load_target, metering, session_of
from .batch_tab import BatchTab, batch_lesson_figure
from .readouts import plot
from .tabs import stop_tab

COLOURS = {"plain": charts.COLOURS["plain"], "speculative": charts.COLOURS["accepted"],
           "wrong": charts.COLOURS["rejected"], "exact": charts.COLOURS["bonus"]}
HISTOGRAM_BARS = 12  # the most frequent tested tokens shown; the rest are summed in "other"
SAVED_MAX_BYTES = 20_000_000  # a saved lesson is tens of kilobytes; anything this large is not one


# text from a record, in a Markdown widget ----------------------------------------------------------------------

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>&~:])")


def markdown_text(text: str) -> str:
    """Text shown as itself in Markdown: every character Markdown or HTML would read as markup is escaped, so
    that a link, an image (which the browser would fetch) or a tag in a model's output or in a saved file is
    shown as the characters it is."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def markdown_safe(value):
    """A record with every string in it (at any depth) made markdown_text; numbers and structure unchanged."""
    if isinstance(value, str):
        return markdown_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        copy = dataclasses.replace(value) if all(f.init for f in dataclasses.fields(value)) else value
        for f in dataclasses.fields(value):
            object.__setattr__(copy, f.name, markdown_safe(getattr(value, f.name)))
        return copy
    if isinstance(value, dict):
        return type(value)({k: markdown_safe(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(markdown_safe(v) for v in value)
    return value


def sentence_text(sentence: Callable, record, *args) -> str:
    """A lesson's sentence (Markdown: its own emphasis stays) of a record whose strings, a model's tokens or a
    saved file's fields, are shown as text."""
    return sentence(markdown_safe(record), *args)


# lesson 1 -------------------------------------------------------------------------------------------------------

def mechanic_html(record: lessons.Mechanic) -> str:
    """The token view in its steps layout (one lane per target forward), whatever the Run tab's reading mode."""
    return f'<div class="sv-lesson-steps">{render.token_view_html(record.tokens, record.prompt)}</div>'


# lesson 2 -------------------------------------------------------------------------------------------------------

def side_by_side_html(record: lessons.SideBySide) -> str:
    def column(title, tokens):
        spans = "".join(f'<span class="tok tok-target">{html.escape(t)}</span>' for t in tokens)
        return f'<div class="sv-lesson-col"><b>{title}</b><div class="sv-output">{spans}</div></div>'

    return (f'<div class="sv-lesson-pair">{column(f"with {html.escape(record.method)}", record.speculative)}'
            f'{column("plain decoding", record.plain)}</div>')


def distribution_figure(record: lessons.Distribution | None) -> dict:
    if record is None or not record.plain.runs:
        return charts.empty_figure("Press Run lesson: the histograms fill as the runs come in.", 380)
    arms = [("plain", record.plain), ("speculative", record.speculative)]
    if record.wrong is not None:
        arms.append(("wrong", record.wrong))
    total = sum((h.counts for _, h in arms), start=Counter())
    shown = [t for t, _ in total.most_common(HISTOGRAM_BARS)]
    labels = charts._unique_labels(shown, lambda t: record.token_texts.get(t, str(t)))
    data = []
    for key, h in arms:
        if not h.runs:
            continue
        share = [h.counts.get(t, 0) / h.runs for t in shown]
        other = 1 - sum(share)
        method = charts.escape_label(record.method)
        name = {"plain": "plain decoding", "speculative": f"with {method}", "wrong": f"{method}, wrong verifier"}[key]
        data.append({"type": "bar", "x": labels + ["other"], "y": share + [other], "name": f"{name} ({h.runs} runs)",
                     "marker": {"color": COLOURS[key]}})
    data.append({"type": "scatter", "mode": "markers", "x": labels, "y": [record.exact.get(t, 0.0) for t in shown],
                 "name": "target's exact probability", "marker": {"color": COLOURS["exact"], "symbol": "diamond", "size": 9}})
    fig = charts._figure(data, f"The second new token, {record.runs} seeds each, temperature {record.temperature}", 400)
    fig["layout"]["barmode"] = "group"
    charts._axes(fig, 1, None, {"title": {"text": "share of runs"}, "rangemode": "tozero"})
    return fig


# lesson 3 -------------------------------------------------------------------------------------------------------

def verify_cost_figure(record: lessons.VerifyCost | None) -> dict:
    if record is None or not record.points:
        return charts.empty_figure("Press Run lesson to time the target's forward on this machine.", 360)
    xs = [p.x for p in record.points]
    data = [{"type": "scatter", "mode": "lines+markers", "x": xs, "y": [p.ms for p in record.points],
             "name": "measured forward (ms)", "line": {"color": COLOURS["speculative"]}},
            {"type": "scatter", "mode": "lines", "x": xs, "y": [record.floor_ms] * len(xs),
             "name": f"weight-read floor: {_mb(record.weight_bytes)} at {record.bandwidth_gbs:g} GB/s "
                     f"({charts.escape_label(record.bandwidth_source)})",
             "line": {"color": COLOURS["wrong"], "dash": "dash"}}]
    fig = charts._figure(data, f"One forward of K new positions on {charts.escape_label(record.device)}", 380)
    charts._axes(fig, 1, {"title": {"text": "K: positions checked in one forward (γ + 1)"}, "dtick": 1},
                 {"title": {"text": "ms"}, "rangemode": "tozero"})
    return fig


# lesson 4 -------------------------------------------------------------------------------------------------------

ACCEPTANCE_HEADERS = lessons.speedup.HEADERS
ACCEPTANCE_WIDTHS = ["10%", "8%", "5%", "5%", "5%", "15%", "10%", "42%"]  # the literature column wraps in its own


def what_if_figure(rows: list[lessons.AcceptanceRow], alpha: float, gamma: int, c: float) -> dict:
    """Expected speedup against alpha at the chosen gamma and c, the chosen alpha marked, the measured runs as
    points, one colour a method (their own gamma and c differ: the curve is a guide, not a fit)."""
    alphas = [i / 100 for i in range(0, 100)]
    data = [{"type": "scatter", "mode": "lines", "x": alphas,
             "y": [expected_speedup(a, int(gamma), c) for a in alphas],
             "name": f"expected, γ = {int(gamma)}, c = {c:g}", "line": {"color": COLOURS["exact"]}},
            {"type": "scatter", "mode": "markers", "x": [alpha], "y": [expected_speedup(alpha, int(gamma), c)],
             "name": f"α = {alpha:.2f}", "marker": {"color": COLOURS["exact"], "size": 12, "symbol": "diamond"}}]
    measured = [r for r in rows if r.alpha is not None]
    palette = [charts.COLOURS[k] for k in ("accepted", "resampled", "verify", "draft", "rejected", "plain")]
    for i, method in enumerate(dict.fromkeys(r.method for r in measured)):  # one trace a method: a legend, no overlap
        mine = [r for r in measured if r.method == method]
        data.append({"type": "scatter", "mode": "markers", "x": [r.alpha for r in mine],
                     "y": [r.measured_speedup for r in mine], "name": f"{charts.escape_label(method)} (measured)",
                     "customdata": [charts.escape_label(r.kind) + (" (noisy)" if r.doubt else "") for r in mine],
                     "hovertemplate": "%{customdata}: α %{x:.2f}, %{y:.2f}×<extra></extra>",
                     "marker": {"color": palette[i % len(palette)], "size": 10,  # hollow: failed its check
                                "symbol": ["circle-open" if r.doubt else "circle" for r in mine]}})
    fig = charts._figure(data, "What if: expected speedup against acceptance α", 400)
    charts._axes(fig, 1, {"title": {"text": "α (share of drafts accepted)"}, "range": [0, 1]},
                 {"title": {"text": "speedup over plain"}, "rangemode": "tozero"})
    fig["layout"]["shapes"].append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                                    "line": {"color": "#999", "dash": "dot", "width": 1}})
    return fig


# lesson 6 -------------------------------------------------------------------------------------------------------

DRAFTER_HEADERS = lessons.drafters.HEADERS


# lesson 7 -------------------------------------------------------------------------------------------------------

def bugs_figure(record: lessons.bugs.Bugs | None) -> dict:
    """Each arm's share of its seeds on the most frequent first tokens, beside the target's exact probability."""
    if record is None or not record.seeds:
        return charts.empty_figure("Press Run lesson: every verifier's histogram fills as the seeds come in.", 380)
    shown, shares = lessons.bugs.bug_figure_data(record, HISTOGRAM_BARS)
    labels = charts._unique_labels(shown, lambda t: record.token_texts.get(t, str(t)))
    data = []
    for arm in record.arms:
        slip = lessons.bugs.SLIP_BY_KEY[arm.key]
        colour = COLOURS["speculative"] if arm.key == "correct" else None if slip.wrong else COLOURS["plain"]
        data.append({"type": "bar", "x": labels, "y": shares[arm.key], "name": charts.escape_label(slip.label),
                     **({"marker": {"color": colour}} if colour else {})})
    data.append({"type": "scatter", "mode": "markers", "x": labels, "y": [record.exact.get(t, 0.0) for t in shown],
                 "name": "target's exact probability", "marker": {"color": COLOURS["exact"], "symbol": "diamond", "size": 9}})
    fig = charts._figure(data, f"The first new token, {record.seeds} seeds, temperature {record.temperature}", 420)
    fig["layout"]["barmode"] = "group"
    charts._axes(fig, 1, None, {"title": {"text": "share of seeds"}, "rangemode": "tozero"})
    return fig


# saved runs -----------------------------------------------------------------------------------------------------

def read_saved(paths) -> tuple[dict[str, SavedLesson], list[str]]:
    """Lessons saved by `specviz learn --out` (a file a lesson) or --json (a file a run), by lesson key (a later
    file of one lesson wins), and one line for each file that is not one: a bad file is reported, never raised."""
    if isinstance(paths, (str, bytes)) or hasattr(paths, "name"):
        paths = [paths]
    found, errors = {}, []
    for path in paths or []:
        path = getattr(path, "name", path)
        name = os.path.basename(str(path))
        try:
            if os.path.getsize(path) > SAVED_MAX_BYTES:
                raise SavedLessonError(f"{name} is {os.path.getsize(path) / 1e6:.0f} MB: not a saved lesson")
            with open(path, "rb") as handle:
                text = handle.read()
        except OSError as error:
            errors.append(f"{name}: cannot be read ({error.strerror or error})")
            continue
        except SavedLessonError as error:
            errors.append(str(error))
            continue
        try:  # a file of --out holds one lesson, a file of --json every lesson of a run
            many = load_lessons(text, name)
        except SavedLessonError as error:
            errors.append(str(error))
            continue
        for saved in many:
            found[saved.lesson.key] = saved
    return found, errors


def saved_status_html(saved: SavedLesson, sentence: str = "") -> str:
    """What stands where a live run says "measured just now on this machine": the run is not live. sentence: the
    lesson's own, for lesson 5, whose sentence is its status line (the Batch tab's)."""
    return render.status_html(f"Saved run, not measured here: {saved.label} ({saved.name})."
                              + (f" {sentence}" if sentence else ""), "saved")


def saved_summary_html(found: dict[str, SavedLesson], errors: list[str]) -> str:
    parts = [render.status_html(error, "error") for error in errors]
    if found:
        items = "".join(f"<li>{saved.lesson.number} · {html.escape(saved.lesson.title)}: {html.escape(saved.label)}</li>"
                        for saved in sorted(found.values(), key=lambda s: s.lesson.number))
        parts.append(f'<div class="sv-status sv-saved"><b>Saved runs shown, not live measurements:</b><ul>{items}</ul>'
                     f'</div>')
    return "".join(parts)


def unchanged_widgets(record: lessons.exactness.Unchanged) -> tuple[str, str, dict, str]:
    """Lesson 2's whole record as its four widgets: the greedy pair and sentence, the histograms and their sentence."""
    return (side_by_side_html(record.greedy), sentence_text(side_by_side_sentence, record.greedy),
            distribution_figure(record.sampled), sentence_text(distribution_sentence, record.sampled))


# the tab --------------------------------------------------------------------------------------------------------

LESSONS = lessons.SETTINGS  # the settings each lesson runs with; "Open in the Run tab" copies them there
RUN_TAB = "run"  # the Run tab's id in the app's gr.Tabs: "Open in the Run tab" selects it by id, not by its label


def lesson_records(name: str, start: Callable, prompt: str | None = None) -> Iterator[tuple]:
    """A lesson measured on the target `name`: ("loaded",), then ("record", record) for each record start(model)
    yields (one at a time under the engine lock, so that other users' steps interleave), or ("failed", message).
    A GPU call: `start` must pickle (a module-level function, or a functools.partial of one)."""
    try:
        with live.POOL.using(name):
            model = load_target(name)
            if prompt is not None:  # a caller's prompt: its tokens within the profile's limit
                encode_prompt(model, prompt)
            yield ("loaded",)
            records = start(model)
            try:
                while True:
                    with ENGINE_LOCK:
                        record = next(records, None)
                    if record is None:
                        return
                    yield ("record", record)
            finally:
                records.close()
    except Exception as error:
        yield ("failed", message_of(error))


def exact_records(model, prompt: str, method: str, max_new: int, runs: int, temperature: float) -> Iterator:
    """Lesson 2 as the tab runs it: the greedy pair, then the histograms as they fill."""
    yield lessons.greedy_side_by_side(model, prompt, method, max_new_tokens=max_new)
    yield from lessons.distribution(model, prompt, method, runs, temperature)


def last_record(target: str, start: Callable, cancel, prompt: str | None = None) -> object:
    """A lesson run to its end in a GPU call, as an endpoint answers it: its last record, or SpecvizError with
    the lesson's failure or, when the caller cancelled, the stopped message."""
    record = None
    for item in pull(gpu(lesson_records)(target, start, prompt), cancel):
        if item[0] == "failed":
            raise SpecvizError(item[1])
        if item[0] == "record":
            record = item[1]
    if cancel.is_set() or record is None:
        raise SpecvizError(stopped_message(cancel))
    return record


def distribution_api(prompt: str = LESSONS["exact"]["prompt"], method: str = "medusa", runs: int = 150,
                     temperature: float = 0.7, seed: int = 0, wrong: bool = True, target: str = DEFAULT_MODEL,
                     request: gr.Request = None) -> dict:
    """Lesson 2 as one call: does speculative sampling keep the target's distribution? The next-token histograms
    with and without speculation (and with a deliberately wrong verifier), the two-sample and exact p-values, and
    whether the wrong verifier was caught.

    Args:
        prompt: the text whose next tokens are sampled.
        method: the drafter whose sampled output is tested (e.g. medusa, eagle, early-exit, draft, ngram).
        runs: seeds sampled a way, 10 to 1000 (300 on a public server); more runs, a sharper test and a longer call.
        temperature: the sampling temperature, above 0.
        seed: the first seed; run i uses seed + i.
        wrong: also run a deliberately wrong verifier on the same seeds, which the test must catch.
        target: the target model: "default" (SmolLM2-135M-Instruct) or another this server offers.
    """
    cancel = session_of(request).watch()
    try:
        form = read_form(dict(prompt=prompt, method=method, runs=runs, temperature=temperature, seed=seed,
                              wrong=wrong, target=target), live.PROFILE)
        start = functools.partial(lessons.distribution, prompt=form.prompt, method=form.method, runs=form.runs,
                                  temperature=form.settings.temperature, first_seed=form.settings.seed or 0,
                                  wrong=form.wrong)
        with metering(charge_of(request)):
            record = last_record(form.target, start, cancel, form.prompt)
        return record.to_dict()
    except Exception as error:
        raise gr.Error(message_of(error), print_exception=False) from None
    finally:
        cancel.set()


# drafters that draw their first draft from a q (lesson 7 needs one), without a draft model (its form has none)
BUGS_METHODS = tuple(m.name for m in registry.methods() if m.draws_from_q and not m.uses_draft_model)
BUGS_PROMPT_CHARS = 2000  # lesson 7 tests the first new token: a long prompt only costs the forward


def bugs_api(prompt: str = lessons.bugs.PROMPT, method: str = lessons.bugs.METHOD, runs: int = lessons.bugs.RUNS,
             temperature: float = lessons.bugs.TEMPERATURE, rounding: bool = True, target: str = DEFAULT_MODEL,
             request: gr.Request = None) -> dict:
    """Lesson 7 as one call: every deliberately wrong verifier and drafter beside the correct one on the same seeds,
    each one's fit to the target's exact distribution of the first new token and the seeds it took to catch; with
    rounding, bfloat16 greedy output beside float32's."""
    cancel = session_of(request).watch()
    try:
        form = read_form(dict(prompt=prompt, method=method, runs=runs, temperature=temperature, rounding=rounding,
                              target=target), live.PROFILE)
        if len(form.prompt) > BUGS_PROMPT_CHARS:
            raise SpecvizError(f"the prompt is limited to {BUGS_PROMPT_CHARS} characters here, got {len(form.prompt)}")
        if form.method not in BUGS_METHODS:
            raise SpecvizError(f"method must be one of {', '.join(BUGS_METHODS)} (a drafter that samples from a q), "
                               f"got {form.method!r}")
        if not 0.1 <= form.settings.temperature <= 2.0:
            raise SpecvizError(f"temperature must be between 0.1 and 2, got {form.settings.temperature!r}")
        start = functools.partial(lessons.bugs.bugs, prompt=form.prompt, method=form.method, runs=form.runs,
                                  temperature=form.settings.temperature, most=min(3000, 20 * form.runs),
                                  rounding_tokens=16 if form.rounding else 0)
        with metering(charge_of(request)):
            record = last_record(form.target, start, cancel, form.prompt)
        return plain_record(record) | {"rows": lessons.bugs.bug_rows(record),
                                       "sentence": lessons.bugs.bug_sentence(record)}
    except Exception as error:
        raise gr.Error(message_of(error), print_exception=False) from None
    finally:
        cancel.set()


TAB_NAMES = {"mechanic": "Mechanic", "exact": "Same output", "cost": "Cost of K", "acceptance": "Acceptance",
             "batch": "Batch size", "drafters": "Drafters", "bugs": "Bugs"}  # the lessons' tabs, in order


def tab_title(key: str) -> str:
    return f"{list(TAB_NAMES).index(key) + 1} · {TAB_NAMES[key]}"


def lesson_heading(key: str) -> str:
    """A lesson's number and full title (specviz.lessons.catalogue), at the head of its tab."""
    lesson = next(lesson for lesson in lessons.LESSONS if lesson.key == key)
    return f"{lesson.number} · {lesson.title}"


def picked(event: gr.SelectData) -> str:
    """The lesson picker follows a tab chosen in the bar."""
    return list(TAB_NAMES)[event.index]


class LearnTab:
    """Seven short lessons."""

    def build(self, target, run_fields: list, engine: dict, batch_prompts: list[str], tabs: gr.Tabs | None = None) -> list:
        """target: the Run tab's target; run_fields: its prompt, method, gamma, temperature, max new tokens, seed
        (what "Open in the Run tab" fills in); batch_prompts: what lesson 5 decodes in batches; tabs: the app's
        gr.Tabs, whose tab RUN_TAB "Open in the Run tab" selects (None: it fills the fields in only). Returns
        the lessons' events, for the Run tab's Stop to cancel."""
        self.target, self.run_fields, self.engine, self.tabs = target, run_fields, engine, tabs
        self.events = []
        self.saved_draws = {}  # lesson key -> (draw(record, what-if sliders) -> {widget: value}, status, widgets)
        gr.Markdown("Short lessons, each a claim, a measurement made now on this machine and model, and one "
                    "sentence on what it showed. On a quiet 2-core CPU lessons 1 to 6 each take under a minute, "
                    "lesson 7 about two; a machine busy with other work takes several times as long. While one "
                    "runs, its status line counts what is done and estimates the time left.")
        with gr.Accordion("Open a saved run (measured elsewhere, for instance on a GPU)", open=False):
            gr.Markdown("`python -m specviz learn all --out DIR` measures every lesson on the machine it runs on and "
                        "writes one `lesson-N-KEY.json` a lesson; open one or several here to draw them as a live run "
                        "would, each marked with the device, date and commit it was measured on.")
            saved = gr.File(label="Open a saved run (lesson JSON files)", file_count="multiple", file_types=[".json"],
                            elem_id="sv-learn-saved")
            saved_status = gr.HTML(elem_id="sv-learn-saved-status")
        self.saved_status = saved_status
        # short tab titles (the lesson's full title heads it), so that all seven fit a 1280 px bar; a phone's
        # bar shows two or three, so the picker above lists them all (assets/specviz.css shows it there)
        picker = gr.Radio([(f"{number} · {name}", key) for number, (key, name) in enumerate(TAB_NAMES.items(), 1)],
                          value="mechanic", show_label=False, container=False, elem_id="sv-learn-pick")
        with gr.Tabs(elem_id="sv-lessons") as lesson_tabs:
            with gr.Tab(tab_title("mechanic"), id="mechanic"):
                self._mechanic()
            with gr.Tab(tab_title("exact"), id="exact"):
                self._exact()
            with gr.Tab(tab_title("cost"), id="cost"):
                self._cost()
            with gr.Tab(tab_title("acceptance"), id="acceptance"):
                self._acceptance()
            with gr.Tab(tab_title("batch"), id="batch"):
                gr.Markdown(f"**{lesson_heading('batch')}.** {lessons.batch_size.CLAIM}")
                batch = BatchTab("sv-learn-batch", api_name=None)
                self.events.append(batch.build(target, batch_prompts, engine))
            with gr.Tab(tab_title("drafters"), id="drafters"):
                self._drafters()
            with gr.Tab(tab_title("bugs"), id="bugs"):
                self._bugs()
        picker.change(lambda key: gr.Tabs(selected=key), [picker], [lesson_tabs], api_visibility="private",
                      concurrency_limit=None, show_progress="hidden")
        lesson_tabs.select(picked, None, [picker], api_visibility="private", concurrency_limit=None,
                           show_progress="hidden")
        self._saved_batch(batch)
        drawn = dict.fromkeys(w for _, status, widgets in self.saved_draws.values() for w in (status, *widgets))
        saved.upload(self.on_saved, [saved, *self.what_if_inputs], [saved_status, *drawn], api_visibility="private",
                     concurrency_limit=None)
        return self.events

    def on_saved(self, paths, alpha, gamma, c):
        """Draws each opened lesson with the functions a live run uses, its status saying where it was measured."""
        try:  # the what-if sliders' values, read at the boundary as every handler's are
            form = read_form({"alpha": alpha, "what_if_gamma": gamma, "cost": c}, live.PROFILE)
        except SpecvizError as error:
            return {self.saved_status: render.status_html(str(error), "error")}
        found, errors = read_saved(paths)
        if not found and not errors:
            return {}
        out = {self.saved_status: saved_summary_html(found, errors)}
        for key, saved in found.items():
            draw, status, _ = self.saved_draws[key]
            sentence = saved.lesson.sentence(saved.record) if key == "batch" else ""
            out |= draw(saved.record, (form.alpha, form.what_if_gamma, form.cost)) | {status: saved_status_html(saved, sentence)}
        return out

    def _saved_batch(self, batch: BatchTab):
        self.saved_draws["batch"] = (lambda r, _: {batch.plot: plot(batch_lesson_figure(r))}, batch.status, [batch.plot])

    # layout shared by every lesson
    def _frame(self, key: str, claim: str):
        gr.Markdown(f"**{lesson_heading(key)}.** {claim}")
        with gr.Row():
            run = gr.Button("Run lesson", variant="primary", elem_id=f"sv-learn-{key}")
            stop = gr.Button("Stop", variant="stop", elem_id=f"sv-learn-{key}-stop")
            link = gr.Button("Open in the Run tab", elem_id=f"sv-learn-{key}-link")
        status = gr.HTML(label=f"{key} status", elem_id=f"sv-learn-{key}-status")
        settings = LESSONS[key]
        filled = link.click(lambda: [settings[k] for k in ("prompt", "method", "gamma", "temperature", "max_new", "seed")],
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

    def _mechanic(self):
        run, stop, status = self._frame("mechanic", lessons.steps.CLAIM)
        view = gr.HTML(elem_id="sv-learn-mechanic-view")
        table = gr.Dataframe(headers=lessons.steps.HEADERS, interactive=False)
        sentence = gr.Markdown(elem_id="sv-learn-mechanic-sentence")

        def handler(form, state, cancel):
            s = LESSONS["mechanic"]
            yield from self._stream(cancel, status, form.target, functools.partial(
                lessons.mechanic, prompt=s["prompt"], method=s["method"], gamma=s["gamma"], max_new_tokens=s["max_new"]),
                lambda r, done: {view: mechanic_html(r), table: mechanic_rows(r),
                                 sentence: sentence_text(mechanic_sentence, r) if done else ""})

        self._wire(run, stop, status, handler, [self.target], [view, table, sentence])
        self.saved_draws["mechanic"] = (lambda r, _: {view: mechanic_html(r), table: mechanic_rows(r),
                                                      sentence: sentence_text(mechanic_sentence, r)}, status,
                                        [view, table, sentence])

    def _exact(self):
        run, stop, status = self._frame("exact", lessons.exactness.CLAIM)
        with gr.Row():
            runs = gr.Slider(30, 300, value=150, step=10, label="seeds per histogram (more: more power, longer)",
                             elem_id="sv-learn-exact-runs")
            temperature = gr.Slider(0.3, 1.5, value=LESSONS["exact"]["temperature"], step=0.1, label="temperature")
        pair = gr.HTML(elem_id="sv-learn-exact-pair")
        greedy = gr.Markdown(elem_id="sv-learn-exact-greedy")
        figure = gr.Plot(label="next-token histograms", elem_id="sv-learn-exact-plot")
        sentence = gr.Markdown(elem_id="sv-learn-exact-sentence")
        gr.Markdown("The wrong verifier (`specviz.rule.verify.verify_sampled_without_residual`) accepts as the real one "
                    "does but, after a rejection, draws from the target's p instead of norm(max(0, p − q)): the "
                    "drafter's favourite gets a second chance. The test must catch it.")

        def handler(form, state, cancel):
            s = LESSONS["exact"]

            def draw(r, done):
                if isinstance(r, lessons.SideBySide):
                    return {pair: side_by_side_html(r), greedy: sentence_text(side_by_side_sentence, r)}
                return {figure: plot(distribution_figure(r)), sentence: sentence_text(distribution_sentence, r, done)}

            yield from self._stream(cancel, status, form.target, functools.partial(
                exact_records, prompt=s["prompt"], method=s["method"], max_new=s["max_new"], runs=form.runs,
                temperature=form.settings.temperature), draw)

        self._wire(run, stop, status, handler, [self.target, runs, temperature], [pair, greedy, figure, sentence],
                   ("target", "runs", "temperature"))

        def saved_draw(record, _):
            a, b, fig, text = unchanged_widgets(record)
            return {pair: a, greedy: b, figure: plot(fig), sentence: text}

        self.saved_draws["exact"] = (saved_draw, status, [pair, greedy, figure, sentence])

    def _cost(self):
        run, stop, status = self._frame("cost", lessons.forward_cost.CLAIM)
        figure = gr.Plot(label="forward time against K", elem_id="sv-learn-cost-plot")
        sentence = gr.Markdown(elem_id="sv-learn-cost-sentence")

        def handler(form, state, cancel):
            yield from self._stream(cancel, status, form.target, lessons.verify_cost,
                                    lambda r, done: {figure: plot(verify_cost_figure(r)),
                                                     sentence: sentence_text(verify_cost_sentence, r) if done else ""})

        self._wire(run, stop, status, handler, [self.target], [figure, sentence])
        self.saved_draws["cost"] = (lambda r, _: {figure: plot(verify_cost_figure(r)),
                                                  sentence: sentence_text(verify_cost_sentence, r)},
                                    status, [figure, sentence])

    def _acceptance(self):
        run, stop, status = self._frame("acceptance", lessons.speedup.CLAIM)
        table = gr.Dataframe(headers=ACCEPTANCE_HEADERS, interactive=False, wrap=True, elem_id="sv-learn-acceptance-table",
                             column_widths=ACCEPTANCE_WIDTHS)  # every column in sight at 1280 px
        sentence = gr.Markdown(elem_id="sv-learn-acceptance-sentence")
        gr.Markdown("**What if.** Move α, γ and c (the drafter's time per token over the target's forward): the "
                    "curve is the expected speedup, the points are the runs measured above. The literature column "
                    "quotes the papers' own figures, measured on other targets (7B-70B where stated) on GPUs and TPUs, not here; all of them:\n\n"
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
            yield from self._stream(cancel, status, form.target, lessons.acceptance,
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

    def _drafters(self):
        run, stop, status = self._frame("drafters", lessons.drafters.CLAIM)
        table = gr.Dataframe(headers=DRAFTER_HEADERS, interactive=False)
        sentence = gr.Markdown(elem_id="sv-learn-drafters-sentence")

        def handler(form, state, cancel):
            yield from self._stream(cancel, status, form.target, lessons.drafter_costs,
                                    lambda r, done: {table: drafter_rows(r),
                                                     sentence: sentence_text(drafter_sentence, r) if done else ""})

        self._wire(run, stop, status, handler, [self.target], [table, sentence])
        self.saved_draws["drafters"] = (lambda r, _: {table: drafter_rows(r), sentence: sentence_text(drafter_sentence, r)},
                                        status,
                                        [table, sentence])

    def _bugs(self):
        run, stop, status = self._frame("bugs", lessons.bugs.CLAIM)
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
            yield from self._stream(cancel, status, form.target, lessons.bugs.bugs, draw)

        self._wire(run, stop, status, handler, [self.target], [table, figure, sentence])
        self.saved_draws["bugs"] = (lambda r, _: draw(r, True), status, [table, figure, sentence])

    def _stream(self, cancel, status, target: str, start: Callable, draw: Callable) -> Iterator[dict]:
        """Loads the target, then runs the lesson one record at a time (other users' steps in between), in a GPU
        call (lesson_records: `start` must pickle), stopping between records when Stop is pressed. The status line
        says how far it has come and the time left; what is drawn before the end is partial, and says so."""
        yield {status: render.status_html(f"Loading {target}…", "info")}
        last, began, samples = None, time.monotonic(), []
        for item in pull(gpu(lesson_records)(target, start), cancel):
            if item[0] == "failed":
                yield {status: render.status_html(item[1], "error")}
                return
            if item[0] == "record":
                last = item[1]
                done = progress_of(last)
                if done is not None:
                    samples.append((time.monotonic(), done.done))
                yield {status: measuring_html(done, samples, time.monotonic() - began), **draw(last, False)}
            else:
                began = time.monotonic()
                yield {status: measuring_html(None, [], 0.0)}
        if cancel.is_set():
            yield {status: render.status_html(stopped_message(cancel) + partial_note(last), "warn")}
        elif last is not None:
            yield {status: render.status_html(f"Done in {elapsed_text(time.monotonic() - began)}: measured just now "
                                              "on this machine.", "ok"), **draw(last, True)}


def elapsed_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def measuring_html(done: Progress | None, samples: list[tuple[float, int]], elapsed: float) -> str:
    """The status line while a lesson runs: "n of N" in its unit, the time so far and the time left at the
    recent pace, and that what is drawn is partial."""
    if done is None:
        return render.status_html(f"Measuring… {elapsed_text(elapsed)}", "info")
    left = left_text(time_left(samples, done.total))
    return render.status_html(f"Measuring: {done} · {elapsed_text(elapsed)}" + (f" · {left}" if left else "")
                              + ". Partial results below until it is done.", "info")


def partial_note(record) -> str:
    done = progress_of(record) if record is not None else None
    return f" What is shown is partial: {done}." if done is not None and not done.finished else ""
