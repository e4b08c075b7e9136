"""The Compare methods and Cost curve tabs: each owns its widgets, its handler and its event. Each computation is
a GPU call of picklable arguments that yields records (compare_records, cost_records); the handler draws them."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import gradio as gr

from ..api import check_drafter, first_difference
from ..measure.cost_curve import latest_points, measure_cost_curve
from ..lessons.forward_cost import curve_sentence
from ..engine.run import SpeculativeRun
from ..errors import MissingDrafterError, SpecvizError
from ..measure.measured import load_measured
from ..records.oracle import oracle_figures
from ..measure.plausibility import BUSY, drafting_share, noise_note, speedup_doubt
from ..methods import names as method_names
from . import charts, render, serving, view
from .endpoint import form_handler, pull, stopped_message
from .form import message_of
from .gpu import gpu
from .engine_lock import ENGINE_LOCK
from .run_request import RunRequest, drafter_for
from .run_setup import RunSetup, capture_bound, encode_prompt, load_models
from .serving import load_target
from .sessions import existing_session_of
from .stepped_runs import StepLog, SteppedRun
from .readouts import plot, plural

COMPARE_FIELDS = ("prompt", "methods", "target", "draft", "gamma", "temperature", "top_p", "max_new_tokens", "seed",
                  "tree", "draft_stop")
SKIPPED_DRAFT = "Skipped draft: it needs a drafter (choose one in the Run tab's settings)."


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


def compare_records(request: RunRequest, methods: tuple[str, ...]) -> Iterator[tuple]:
    """Plain decoding, then each method, of one prompt: ("progress", method, tokens) after every step,
    ("row", figures) after each run, ("skipped", why) for a method that cannot run, or ("failed", message). A
    method whose speedup fails its plausibility check (compare_doubt) is measured once more, plain decoding again
    right before it, and its row keeps the second pair (with its doubt, if that one fails too). A GPU call: it
    runs where gpu() puts it, and closing it ends it at its next step."""
    try:
        with serving.pool().using(request.target, request.draft):
            target, draft = load_models(request)
            encode_prompt(target, request.prompt)  # a prompt it cannot take fails the comparison, before any method
            settings = request.settings

            def timed(method: str):  # one run, step by step: yields its progress, returns its SteppedRun
                # prepared within the bound of a ZeroGPU call, else it goes on without graphs (run_setup.RunSetup)
                setup = RunSetup.make(dataclasses.replace(request, method=method, compare_plain=False), target, draft)
                setup.prepare(capture_bound())
                stepped = SteppedRun(SpeculativeRun(target, setup.proposer, setup.prompt_ids, settings, request.prompt,
                                                    options=setup.options))
                try:
                    while not stepped.done:
                        stepped.advance()
                        yield ("progress", method, stepped.emitted)
                finally:
                    stepped.close()
                return stepped

            plain = None
            for method in ("plain", *methods):
                try:
                    check_drafter(method, draft)
                except MissingDrafterError:
                    yield ("skipped", SKIPPED_DRAFT)
                    continue
                try:
                    stepped = yield from timed(method)
                except SpecvizError as error:
                    yield ("skipped", f"Skipped {method}: {error}")
                    continue
                baseline = plain
                if method == "plain":
                    plain = baseline = stepped
                elif compare_doubt(baseline, stepped):  # measured again, the pair back to back
                    baseline = yield from timed("plain")
                    stepped = yield from timed(method)
                yield ("row", compare_figures(method, stepped, baseline, settings))
    except Exception as error:
        yield ("failed", message_of(error))


def compare_doubt(plain: StepLog | None, run: StepLog) -> str | None:
    """Why a method's speedup over plain decoding is not to be trusted (specviz.measure.plausibility, the Run tab's
    check, on each run's own steps in engine time), or None: also None for plain decoding itself."""
    if plain is None or run is plain or run.method == "plain":
        return None
    tau = run.result.metrics.mean_accepted_length
    m = run.result.metrics
    return speedup_doubt(plain.engine_wall / run.engine_wall, tau, plain.durations, run.durations,
                         [s.gamma for s in run.steps], drafting=drafting_share(m.draft_seconds, m.verify_seconds))


def compare_figures(method: str, run: StepLog, plain: StepLog | None, settings) -> dict:
    """One Compare row's figures, from a finished run and the plain run it is compared with."""
    metrics = view.running_metrics(run.result.steps, run.engine_wall, run.result.metrics.prefill_seconds)
    same = "–"
    if settings.greedy and plain is not None:
        same = "yes" if first_difference(run.result.token_ids, plain.result.token_ids) is None else "no"
    plain_wall = plain.engine_wall if plain is not None else None
    # the perfect drafter at this run's step costs, on the same clock as the speedup (engine time)
    oracle = oracle_figures(run.result.steps, metrics, settings.gamma, plain_wall)
    return {"method": method, "new_tokens": metrics.new_tokens, "steps": metrics.steps,
            "tau": metrics.mean_accepted_length, "alpha": metrics.acceptance_rate,
            "cost": metrics.cost_ratio, "tokens_per_second": metrics.tokens_per_second,
            "speedup": plain_wall / run.engine_wall if plain_wall is not None else None,
            "oracle_tau": oracle.oracle_tau, "oracle_speedup": oracle.oracle_speedup,
            "verify_share": oracle.verify_share, "accepted_lengths": oracle.accepted_lengths,
            "undrafted": sum(1 for s in run.result.steps if s.gamma == 0), "same": same,
            "doubt": compare_doubt(plain, run)}


def cost_records(name: str) -> Iterator[tuple]:
    """The target's forward time against positions and batch size: ("device", label), then ("point", CostPoint)
    one at a time (other users' runs interleave between them), or ("failed", message). A GPU call."""
    try:
        with serving.pool().using(name):
            model = load_target(name)
            yield ("device", f"{model.device.type} ({model.describe()}, {str(model.dtype).replace('torch.', '')})")
            measurements = measure_cost_curve(model, as_measured=True)
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
                yield {self.status: render.status_html(f"Running {record[1]}: {plural(record[2], 'token')}…", "info")}
            elif kind == "row":
                rows.append(record[1])
                yield out(f"{record[1]['method']} done.")
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
        for record in pull(gpu(cost_records)(form.target), cancel):
            if record[0] == "failed":
                yield {self.status: render.status_html(record[1], "error")}
                return
            if record[0] == "device":
                device = record[1]
                continue
            point = record[1]
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
