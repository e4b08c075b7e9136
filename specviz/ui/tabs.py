"""The Compare methods and Cost curve tabs: each owns its widgets, its handler and its event. Each computation is
a GPU call of picklable arguments that yields events (compare_records, cost_records); the handler draws them."""
from __future__ import annotations

import time

import gradio as gr

from ..measure.cost_curve import latest_points
from ..lessons.forward_cost import curve_sentence
from ..errors import SpecvizError
from ..measure.measured import load_measured
from ..service import events
from ..service.calls import compare_records, cost_records
from ..measure.plausibility import BUSY, noise_note
from ..methods import names as method_names
from . import charts, render, view
from .endpoint import form_handler, pull, stopped_message

from ..service.gpu import gpu
from ..service.run_request import RunRequest, drafter_for
from .sessions import existing_session_of
from .readouts import plot, plural

COMPARE_FIELDS = ("prompt", "methods", "target", "draft", "gamma", "temperature", "top_p", "max_new_tokens", "seed",
                  "tree", "draft_stop")
def quoted_prompt(prompt: str, most: int = 80) -> str:
    """A prompt in a status line: quoted, cut to `most` characters."""
    text = " ".join(str(prompt).split())
    return f"‘{text if len(text) <= most else text[:most - 1] + '…'}’"


COMPARE_HEADERS = ["method", "new tokens", "steps", "τ", "α", "c", "tok/s", "speedup", "oracle τ", "oracle speedup",
                   "verifying", "steps accepting 0…γ", "same as plain"]
COMPARE_WIDTHS = ["8%", "6%", "6%", "5%", "5%", "5%", "6%", "10%", "6%", "10%", "9%", "16%", "8%"]


def stop_tab(request: gr.Request):
    existing_session_of(request).stop_all()
    return render.status_html("Stopped.", "warn")


def default_methods(runs: list[dict], choices: list[str]) -> list[str]:
    """The methods the Compare tab ticks at first: those the first measured run (the 2-core CPU's) found accepting
    and paying (view.paying_methods); n-gram lookup where there is no measured run."""
    return view.paying_methods(runs[0], choices) if runs else ["ngram"]


class CompareTab:
    """The Run tab's prompt, models and settings through plain decoding and each ticked method."""

    def build(self, fields: dict, engine: dict):
        """fields: the Run tab's components by form field (prompt, target, draft and the decoding settings)."""
        gr.Markdown("**The Run tab's prompt, models and settings** (change them there), through plain decoding "
                    "and each ticked method, one after another in this process. c is what drafting one token "
                    "costs, as a share of one verify pass. The oracle is a perfect drafter: the same steps with "
                    "every draft accepted, at the costs this run measured; verifying is its share of the time; "
                    "the last counts are the steps that accepted 0, 1, … γ drafts, and those that drafted nothing "
                    "(a lookup that found no match). A speedup that fails the Run tab's check (more than τ, or "
                    "steps that disagree with their kind's) is measured again; marked (noisy) if it fails again, "
                    "the status line says why. Ticked at first: the "
                    "drafters that accept and pay on a 2-core CPU (measured on Spec-Bench, below).")
        runs = load_measured()
        choices = list(method_names(drafts=True))
        self.methods = gr.CheckboxGroup(choices, value=default_methods(runs, choices), label="Methods",
                                        elem_id="sv-compare-methods")
        with gr.Row():
            self.button = gr.Button("Compare", variant="primary", elem_id="sv-compare")
            self.stop = gr.Button("Stop", variant="stop", elem_id="sv-compare-stop")
        self.status = gr.HTML(label="compare status")
        self.table = gr.Dataframe(headers=COMPARE_HEADERS, interactive=False, elem_id="sv-compare-table", wrap=True,
                                  column_widths=COMPARE_WIDTHS)  # every column in sight at 1280 px
        self.plot = gr.Plot(label="compare chart")
        if runs:
            with gr.Accordion("Every drafter measured on Spec-Bench", open=False, elem_id="sv-measured"):
                gr.Markdown("The same methods over many prompts of Spec-Bench (Xia et al. 2024), the benchmark of "
                            "the field, on the default target. `draft` is the distilled draft model; `@0.5` its "
                            "draft stop.")
                for run in runs:
                    gr.Markdown(view.measured_caption(run))
                    gr.Dataframe(value=view.measured_table(run), headers=view.MEASURED_HEADERS, interactive=False)
        fields = {**fields, "methods": self.methods}
        handler = form_handler(COMPARE_FIELDS, self.on_compare, self.show_error, defaults={"tree": 0, "draft_stop": 0})
        event = self.button.click(handler, [fields[name] for name in COMPARE_FIELDS],
                                  [self.status, self.table, self.plot],
                                  api_name="compare", preprocess=False, **engine)
        self.stop.click(stop_tab, None, [self.status], cancels=[event], api_name="compare_stop", concurrency_limit=None)
        return event

    def show_error(self, message: str) -> dict:
        return {self.status: render.status_html(message, "error")}

    def on_compare(self, form, state, cancel):
        rows: list[dict] = []
        skipped: list[str] = []  # said in every later status, so that a skip is not overwritten at once

        def table():
            return [view.compare_row(r) for r in rows]

        def out(message, level="info"):
            notes = view.compare_notes(rows)
            extra = [*skipped, *([noise_note("; ".join(notes))] if notes else [])]
            if extra:
                message = "\n".join(m for m in [message, *extra] if m)
                level = "warn" if level in ("info", "ok") else level
            return {self.status: render.status_html(message, level), self.table: table(),
                    self.plot: plot(charts.compare_figure(rows))}

        chosen = list(dict.fromkeys(form.methods))
        if not chosen:
            raise SpecvizError("tick at least one method to compare with plain decoding")
        draft_name = next(filter(None, (drafter_for(m, form.target, form.draft) for m in chosen)), None)
        yield out(f"Loading {form.target}… (the prompt: the Run tab's, {quoted_prompt(form.prompt)})")
        request = RunRequest(form.prompt, chosen[0], form.target, draft_name, form.settings)
        last = 0.0
        for event in pull(gpu(compare_records)(request, tuple(chosen)), cancel):
            match event:
                case events.Failed(message):
                    yield out(message, "error")
                    return
                case events.Skipped(reason):
                    skipped.append(reason)
                    yield out("")
                case events.Progress(method, tokens) if time.monotonic() - last > 0.5:
                    last = time.monotonic()
                    yield {self.status: render.status_html(f"Running {method}: {plural(tokens, 'token')}…", "info")}
                case events.Row(figures):
                    rows.append(figures)
                    yield out(f"{figures['method']} done.")
        if cancel.is_set():
            yield out(stopped_message(cancel), "warn")
            return
        yield out(f"Done: {len(rows)} runs of the Run tab's prompt, {quoted_prompt(form.prompt)}, same settings, same "
                  "process.", "ok")


def cost_sentence(points: list) -> str:
    """What the Cost curve tab measured, in words: lesson 3's sentence for the K curve (one measurement, one
    story), and the same for the batch curve; each with the noise note where its points do not add up."""
    return " ".join(curve_sentence([p for p in points if p.axis == axis]) for axis in ("positions", "batch")).strip()


class CostTab:
    """The target's forward time against new positions and batch size, measured on this machine."""

    def build(self, target, engine: dict):
        gr.Markdown("One forward of the target over K new positions (what verifying γ = K − 1 drafts costs), "
                    "and over a batch of B sequences (one new position each), timed on this machine: the "
                    "sentence under the chart says what it measured. Where checking more positions costs "
                    "little, speculation's verify pass is nearly free; once a batch fills the device, extra "
                    "positions cost, and speculation stops paying.")
        with gr.Row():
            self.button = gr.Button("Measure", variant="primary", elem_id="sv-cost")
            self.stop = gr.Button("Stop", variant="stop", elem_id="sv-cost-stop")
        self.status = gr.HTML(label="cost status")
        self.plot = gr.Plot(label="cost curve")
        self.sentence = gr.Markdown(elem_id="sv-cost-sentence")
        handler = form_handler(("target",), self.on_cost, lambda m: {self.status: render.status_html(m, "error")})
        event = self.button.click(handler, [target], [self.status, self.plot, self.sentence], api_name="cost_curve",
                                  preprocess=False, **engine)
        self.stop.click(stop_tab, None, [self.status], cancels=[event], api_name="cost_stop", concurrency_limit=None)
        return event

    def on_cost(self, form, state, cancel):
        points, device = [], ""
        yield {self.status: render.status_html(f"Loading {form.target}…", "info"), self.sentence: ""}
        for event in pull(gpu(cost_records)(form.target), cancel):
            if isinstance(event, events.Failed):
                yield {self.status: render.status_html(event.message, "error")}
                return
            if isinstance(event, events.Device):
                device = event.label
                continue
            point = event.point
            again = any((p.axis, p.x) == (point.axis, point.x) for p in points)
            points = latest_points([*points, point])  # a point measured again (cost_curve.py) replaces its first
            label = "new positions" if point.axis == "positions" else "batch size"
            what = "measured again (a wider forward measured cheaper)" if again else "measured"
            yield {self.status: render.status_html(f"{label.capitalize()} {point.x} {what}: {point.ms:.1f} ms", "info"),
                   self.plot: plot(charts.cost_figure(points, device))}
        sentence = cost_sentence(points)
        if cancel.is_set():
            status = render.status_html(stopped_message(cancel), "warn")
        elif BUSY in sentence:
            status = render.status_html("Done, but the machine was busy: the sentence below says which figure is "
                                        "noisy.", "warn")
        else:
            status = render.status_html("Done: median of 3 forwards per point.", "ok")
        yield {self.status: status, self.plot: plot(charts.cost_figure(points, device)), self.sentence: sentence}
