"""The Compare methods and Cost curve tabs: each owns its widgets, its handler and its event."""
from __future__ import annotations

import time

import gradio as gr

from ..api import encode, first_difference, make_proposer
from ..cost_curve import latest_points, measure_cost_curve
from ..lessons.forward_cost import curve_sentence
from ..engine import SpeculativeRun
from ..errors import SpecvizError
from ..measured import load_measured
from ..models import DEFAULT_MODEL, load_model
from ..oracle import oracle_figures
from ..plausibility import BUSY
from ..proposers import METHODS, PlainProposer
from ..settings import check_prompt_text
from . import charts, render, view
from .gpu import gpu
from .live import (ENGINE_LOCK, RunRequest, drafter_for, SteppedRun, load_models, model_name, prepare, session_of,
                   settings_from_form)
from .readouts import plot


def quoted_prompt(prompt: str, most: int = 80) -> str:
    """A prompt in a status line: quoted, cut to `most` characters."""
    text = " ".join(str(prompt).split())
    return f"‘{text if len(text) <= most else text[:most - 1] + '…'}’"


COMPARE_HEADERS = ["method", "new tokens", "steps", "τ", "α", "c", "tok/s", "speedup", "oracle τ", "oracle speedup",
                   "verifying", "steps accepting 0…γ", "same as plain"]


def stop_tab(request: gr.Request):
    session_of(request).cancel.set()
    return render.status_html("Stopped.", "warn")


def default_methods(runs: list[dict], choices: list[str]) -> list[str]:
    """The methods the Compare tab ticks at first: those the first measured run (the 2-core CPU's) found accepting
    and paying (view.paying_methods); n-gram lookup where there is no measured run."""
    return view.paying_methods(runs[0], choices) if runs else ["ngram"]


class CompareTab:
    """The Run tab's prompt, models and settings through plain decoding and each ticked method."""

    def build(self, inputs: list, engine: dict):
        """inputs: prompt, target, draft, gamma, temperature, top-p, max new tokens, seed, tree, draft stop (the Run
        tab's)."""
        gr.Markdown("**The Run tab's prompt, models and settings** (change them there), through plain decoding "
                    "and each ticked method, one after another in this process. c is what drafting one token "
                    "costs, as a share of one verify pass. The oracle is a perfect drafter: the same steps with "
                    "every draft accepted, at the costs this run measured; verifying is its share of the time; "
                    "the last counts are the steps that accepted 0, 1, … γ drafts. Ticked at first: the "
                    "drafters that accept and pay on a 2-core CPU (measured on Spec-Bench, below).")
        runs = load_measured()
        choices = [m for m in METHODS if m != "plain"]
        self.methods = gr.CheckboxGroup(choices, value=default_methods(runs, choices), label="Methods",
                                        elem_id="sv-compare-methods")
        with gr.Row():
            self.button = gr.Button("Compare", variant="primary", elem_id="sv-compare")
            self.stop = gr.Button("Stop", variant="stop", elem_id="sv-compare-stop")
        self.status = gr.HTML(label="compare status")
        self.table = gr.Dataframe(headers=COMPARE_HEADERS, interactive=False)
        self.plot = gr.Plot(label="compare chart")
        if runs:
            with gr.Accordion("Every drafter measured on Spec-Bench", open=False, elem_id="sv-measured"):
                gr.Markdown("The same methods over many prompts of Spec-Bench (Xia et al. 2024), the benchmark of "
                            "the field, on the default target. `draft` is the distilled draft model; `@0.5` its "
                            "draft stop.")
                for run in runs:
                    gr.Markdown(view.measured_caption(run))
                    gr.Dataframe(value=view.measured_table(run), headers=view.MEASURED_HEADERS, interactive=False)
        prompt, *rest = inputs
        event = self.button.click(gpu(self.on_compare), [prompt, self.methods, *rest],
                                  [self.status, self.table, self.plot], api_name="compare", **engine)
        self.stop.click(stop_tab, None, [self.status], cancels=[event], api_name="compare_stop", concurrency_limit=None)
        return event

    def on_compare(self, prompt, methods, target, draft, gamma, temperature, top_p, max_new_tokens, seed, tree=0,
                   draft_stop=0, request: gr.Request = None):
        state = session_of(request)
        state.cancel.clear()
        rows: list[dict] = []
        skipped: list[str] = []  # said in every later status, so that a skip is not overwritten at once

        def table():
            return [view.compare_row(r) for r in rows]

        def out(message, level="info"):
            if skipped:
                message = "\n".join(m for m in [message, *skipped] if m)
                level = "warn" if level in ("info", "ok") else level
            return {self.status: render.status_html(message, level), self.table: table(),
                    self.plot: plot(charts.compare_figure(rows))}

        try:
            settings = settings_from_form(max_new_tokens, gamma, temperature, top_p, seed, tree, draft_stop)
            check_prompt_text(prompt)
            chosen = [m for m in (methods or []) if m in METHODS and m != "plain"]
            if not chosen:
                raise SpecvizError("tick at least one method to compare with plain decoding")
            target_name = model_name(target)
            if target_name is None:
                raise SpecvizError("choose a target model ('default' runs offline)")
            draft_name = next(filter(None, (drafter_for(m, target_name, draft) for m in chosen)), None)
            yield out(f"Loading {target_name}… (the prompt: the Run tab's, {quoted_prompt(prompt)})")
            target_model, draft_model = load_models(RunRequest(prompt, chosen[0], target_name, draft_name, settings))
            prompt_ids = encode(target_model, prompt)
        except SpecvizError as error:
            yield out(str(error), "error")
            return
        plain_result, plain_wall = None, None
        for method in ["plain"] + chosen:
            if method == "draft" and draft_model is None:
                skipped.append("Skipped draft: it needs a drafter (choose one in the Run tab's settings).")
                yield out("")
                continue
            try:
                proposer = PlainProposer() if method == "plain" else make_proposer(method, target_model, draft_model)
                prepare(target_model, proposer, prompt_ids, settings)
                stepped = SteppedRun(SpeculativeRun(target_model, proposer, prompt_ids, settings, prompt))
            except SpecvizError as error:
                skipped.append(f"Skipped {method}: {error}")
                yield out("")
                continue
            last = 0.0
            while not stepped.done and not state.cancel.is_set():
                stepped.advance()
                if time.monotonic() - last > 0.5:
                    last = time.monotonic()
                    yield {self.status: render.status_html(
                        f"Running {method}: {stepped.steps[-1].total_emitted if stepped.steps else 0} tokens…", "info")}
            if state.cancel.is_set():
                stepped.close()
                yield out("Stopped.", "warn")
                return
            metrics = view.running_metrics(stepped.result.steps, stepped.engine_wall, stepped.result.metrics.prefill_seconds)
            if method == "plain":
                plain_result, plain_wall = stepped.result, stepped.engine_wall
            same = "–"
            if settings.greedy and plain_result is not None:
                same = "yes" if first_difference(stepped.result.token_ids, plain_result.token_ids) is None else "no"
            # the perfect drafter at this run's step costs, on the same clock as the speedup (engine time)
            oracle = oracle_figures(stepped.result.steps, metrics, settings.gamma, plain_wall)
            rows.append({"method": method, "new_tokens": metrics.new_tokens, "steps": metrics.steps,
                         "tau": metrics.mean_accepted_length, "alpha": metrics.acceptance_rate,
                         "cost": metrics.cost_ratio,
                         "tokens_per_second": metrics.tokens_per_second,
                         "speedup": plain_wall / stepped.engine_wall if plain_result is not None else None,
                         "oracle_tau": oracle.oracle_tau, "oracle_speedup": oracle.oracle_speedup,
                         "verify_share": oracle.verify_share, "accepted_lengths": oracle.accepted_lengths,
                         "same": same})
            yield out(f"{method} done.")
        yield out(f"Done: {len(rows)} runs of the Run tab's prompt, {quoted_prompt(prompt)}, same settings, same "
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
        event = self.button.click(gpu(self.on_cost), [target], [self.status, self.plot, self.sentence],
                                  api_name="cost_curve", **engine)
        self.stop.click(stop_tab, None, [self.status], cancels=[event], api_name="cost_stop", concurrency_limit=None)
        return event

    def on_cost(self, target, request: gr.Request):
        state = session_of(request)
        state.cancel.clear()
        points = []
        try:
            name = model_name(target) or DEFAULT_MODEL
            yield {self.status: render.status_html(f"Loading {name}…", "info"), self.sentence: ""}
            model = load_model(name)
        except SpecvizError as error:
            yield {self.status: render.status_html(str(error), "error")}
            return
        device = f"{model.device.type} ({model.describe()}, {str(model.dtype).replace('torch.', '')})"
        measurements = measure_cost_curve(model, as_measured=True)
        while not state.cancel.is_set():
            with ENGINE_LOCK:  # one point at a time, so that runs of other users interleave
                point = next(measurements, None)
            if point is None:
                break
            again = any((p.axis, p.x) == (point.axis, point.x) for p in points)
            points = latest_points([*points, point])  # a point measured again (cost_curve.py) replaces its first
            label = "new positions" if point.axis == "positions" else "batch size"
            what = "measured again (a wider forward measured cheaper)" if again else "measured"
            yield {self.status: render.status_html(f"{label.capitalize()} {point.x} {what}: {point.ms:.1f} ms", "info"),
                   self.plot: plot(charts.cost_figure(points, device))}
        measurements.close()
        sentence = cost_sentence(points)
        if state.cancel.is_set():
            status = render.status_html("Stopped.", "warn")
        elif BUSY in sentence:
            status = render.status_html("Done, but the machine was busy: the sentence below says which figure is "
                                        "noisy.", "warn")
        else:
            status = render.status_html("Done: median of 3 forwards per point.", "ok")
        yield {self.status: status, self.plot: plot(charts.cost_figure(points, device)), self.sentence: sentence}
