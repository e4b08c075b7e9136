"""The Compare methods and Cost curve tabs: each owns its widgets, its handler and its event. Each computation is
a GPU call of picklable arguments that yields records (compare_records, cost_records); the handler draws them."""
from __future__ import annotations

import time
from collections.abc import Iterator

import gradio as gr

from ..api import check_drafter, encode, first_difference, make_proposer
from ..cost_curve import measure_cost_curve
from ..engine import SpeculativeRun
from ..errors import MissingDrafterError, SpecvizError
from ..measured import load_measured
from ..proposers import METHODS, PlainProposer
from . import charts, live, render, view
from .endpoint import form_handler, pull, stopped_message
from .form import message_of
from .gpu import gpu
from .live import ENGINE_LOCK, RunRequest, SteppedRun, drafter_for, load_models, load_target, prepare, session_of
from .readouts import plot

COMPARE_FIELDS = ("prompt", "methods", "target", "draft", "gamma", "temperature", "top_p", "max_new_tokens", "seed",
                  "tree", "draft_stop")
SKIPPED_DRAFT = "Skipped draft: it needs a drafter (choose one in the Run tab's settings)."


def stop_tab(request: gr.Request):
    session_of(request).stop_all()
    return render.status_html("Stopped.", "warn")


def compare_records(request: RunRequest, methods: tuple[str, ...]) -> Iterator[tuple]:
    """Plain decoding, then each method, of one prompt: ("progress", method, tokens) after every step,
    ("row", figures) after each run, ("skipped", why) for a method that cannot run, or ("failed", message). A GPU
    call: it runs where gpu() puts it, and closing it ends it at its next step."""
    try:
        with live.POOL.using(request.target, request.draft):
            target, draft = load_models(request)
            prompt_ids = encode(target, request.prompt)
            settings = request.settings
            plain_result, plain_wall = None, None
            for method in ("plain", *methods):
                try:
                    check_drafter(method, draft)
                    proposer = PlainProposer() if method == "plain" else make_proposer(method, target, draft)
                    prepare(target, proposer, prompt_ids, settings)
                    stepped = SteppedRun(SpeculativeRun(target, proposer, prompt_ids, settings, request.prompt))
                except MissingDrafterError:
                    yield ("skipped", SKIPPED_DRAFT)
                    continue
                except SpecvizError as error:
                    yield ("skipped", f"Skipped {method}: {error}")
                    continue
                try:
                    while not stepped.done:
                        stepped.advance()
                        yield ("progress", method, stepped.steps[-1].total_emitted if stepped.steps else 0)
                finally:
                    stepped.close()
                metrics = view.running_metrics(stepped.result.steps, stepped.engine_wall,
                                               stepped.result.metrics.prefill_seconds)
                if method == "plain":
                    plain_result, plain_wall = stepped.result, stepped.engine_wall
                same = "–"
                if settings.greedy and plain_result is not None:
                    same = "yes" if first_difference(stepped.result.token_ids, plain_result.token_ids) is None else "no"
                yield ("row", {"method": method, "new_tokens": metrics.new_tokens, "steps": metrics.steps,
                               "tau": metrics.mean_accepted_length, "alpha": metrics.acceptance_rate,
                               "cost": metrics.cost_ratio, "tokens_per_second": metrics.tokens_per_second,
                               "speedup": plain_wall / stepped.engine_wall if plain_result is not None else None,
                               "same": same})
    except Exception as error:
        yield ("failed", message_of(error))


def cost_records(name: str) -> Iterator[tuple]:
    """The target's forward time against positions and batch size: ("device", label), then ("point", CostPoint)
    one at a time (other users' runs interleave between them), or ("failed", message). A GPU call."""
    try:
        with live.POOL.using(name):
            model = load_target(name)
            yield ("device", f"{model.device.type} ({model.describe()}, {str(model.dtype).replace('torch.', '')})")
            measurements = measure_cost_curve(model)
            try:
                while True:
                    with ENGINE_LOCK:
                        point = next(measurements, None)
                    if point is None:
                        return
                    yield ("point", point)
            finally:
                measurements.close()
    except Exception as error:
        yield ("failed", message_of(error))


class CompareTab:
    """The Run tab's prompt, models and settings through plain decoding and each ticked method."""

    def build(self, fields: dict, engine: dict):
        """fields: the Run tab's components by form field (prompt, target, draft and the decoding settings)."""
        gr.Markdown("The prompt, models and settings of the Run tab, through plain decoding and each ticked "
                    "method, one after another in this process. c is what drafting one token costs, as a share "
                    "of one verify pass.")
        self.methods = gr.CheckboxGroup([m for m in METHODS if m != "plain"],
                                        value=[m for m in ("ngram", "early-exit") if m in METHODS], label="Methods")
        with gr.Row():
            self.button = gr.Button("Compare", variant="primary", elem_id="sv-compare")
            self.stop = gr.Button("Stop", variant="stop", elem_id="sv-compare-stop")
        self.status = gr.HTML(label="compare status")
        self.table = gr.Dataframe(headers=["method", "new tokens", "steps", "τ", "α", "c", "tok/s", "speedup",
                                           "same as plain"], interactive=False)
        self.plot = gr.Plot(label="compare chart")
        runs = load_measured()
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
        event = self.button.click(handler, [fields[name] for name in COMPARE_FIELDS], [self.status, self.table, self.plot],
                                  api_name="compare", preprocess=False, **engine)
        self.stop.click(stop_tab, None, [self.status], cancels=[event], api_name="compare_stop", concurrency_limit=None)
        return event

    def show_error(self, message: str) -> dict:
        return {self.status: render.status_html(message, "error")}

    def on_compare(self, form, state, cancel):
        rows: list[dict] = []
        skipped: list[str] = []  # said in every later status, so that a skip is not overwritten at once

        def table():
            return [[r["method"], r["new_tokens"], r["steps"], round(r["tau"], 2),
                     "–" if r["alpha"] is None else round(r["alpha"], 3),
                     "–" if r["cost"] is None else round(r["cost"], 3), round(r["tokens_per_second"], 1),
                     "–" if r["speedup"] is None else f"{r['speedup']:.2f}×", r["same"]] for r in rows]

        def out(message, level="info"):
            if skipped:
                message = "\n".join(m for m in [message, *skipped] if m)
                level = "warn" if level in ("info", "ok") else level
            return {self.status: render.status_html(message, level), self.table: table(),
                    self.plot: plot(charts.compare_figure(rows))}

        chosen = list(dict.fromkeys(form.methods))
        if not chosen:
            raise SpecvizError("tick at least one method to compare with plain decoding")
        draft_name = next(filter(None, (drafter_for(m, form.target, form.draft) for m in chosen)), None)
        yield out(f"Loading {form.target}…")
        request = RunRequest(form.prompt, chosen[0], form.target, draft_name, form.settings)
        last = 0.0
        for record in pull(gpu(compare_records)(request, tuple(chosen)), cancel):
            kind = record[0]
            if kind == "failed":
                yield out(record[1], "error")
                return
            if kind == "skipped":
                skipped.append(record[1])
                yield out("")
            elif kind == "progress" and time.monotonic() - last > 0.5:
                last = time.monotonic()
                yield {self.status: render.status_html(f"Running {record[1]}: {record[2]} tokens…", "info")}
            elif kind == "row":
                rows.append(record[1])
                yield out(f"{record[1]['method']} done.")
        if cancel.is_set():
            yield out(stopped_message(cancel), "warn")
            return
        yield out(f"Done: {len(rows)} runs of the same prompt, same settings, same process.", "ok")


class CostTab:
    """The target's forward time against new positions and batch size, measured on this machine."""

    def build(self, target, engine: dict):
        gr.Markdown("One forward of the target over K new positions (what verifying γ = K - 1 drafts "
                    "costs), and over a batch of B sequences, timed on this machine. On a GPU at batch 1 "
                    "the time hardly grows with K: verification is nearly free. On a CPU it grows. And once "
                    "batching fills the device, extra positions are no longer free: speculation stops paying.")
        with gr.Row():
            self.button = gr.Button("Measure", variant="primary", elem_id="sv-cost")
            self.stop = gr.Button("Stop", variant="stop", elem_id="sv-cost-stop")
        self.status = gr.HTML(label="cost status")
        self.plot = gr.Plot(label="cost curve")
        handler = form_handler(("target",), self.on_cost, lambda m: {self.status: render.status_html(m, "error")})
        event = self.button.click(handler, [target], [self.status, self.plot], api_name="cost_curve", preprocess=False,
                                  **engine)
        self.stop.click(stop_tab, None, [self.status], cancels=[event], api_name="cost_stop", concurrency_limit=None)
        return event

    def on_cost(self, form, state, cancel):
        points, device = [], ""
        yield {self.status: render.status_html(f"Loading {form.target}…", "info")}
        for record in pull(gpu(cost_records)(form.target), cancel):
            if record[0] == "failed":
                yield {self.status: render.status_html(record[1], "error")}
                return
            if record[0] == "device":
                device = record[1]
                continue
            point = record[1]
            points.append(point)
            label = "new positions" if point.axis == "positions" else "batch size"
            yield {self.status: render.status_html(f"Measured {label} {point.x}: {point.ms:.1f} ms", "info"),
                   self.plot: plot(charts.cost_figure(points, device))}
        done = stopped_message(cancel) if cancel.is_set() else "Done: median of 3 forwards per point."
        yield {self.status: render.status_html(done, "warn" if cancel.is_set() else "ok"),
               self.plot: plot(charts.cost_figure(points, device))}
