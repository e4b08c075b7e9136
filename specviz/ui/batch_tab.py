"""The Batch tab: the example prompts decoded in batches of several sizes on this machine, a method against
plain decoding of the same batches, so that a class sees where speculation stops paying as the batch grows
(batch.py, batch_bench.py). The cost curve beside it (the Cost curve tab) says why.

`draft` drafts with the draft model the Run tab picks (run_request.drafter_for: on the default target the
distilled one shipped for it); on another target, with the target itself. `draft (target itself)` always drafts
with the target: every draft is accepted, so what it loses against plain decoding is the verify pass's cost
alone."""
from __future__ import annotations


import gradio as gr

from ..measure.batch_bench import parse_batch_sizes
from ..errors import SpecvizError
from ..lessons.batch_size import batch_sentence as verdict_line
from ..measure.plausibility import BUSY, UNSETTLED
from ..service import events
from ..service.calls import batch_records
from ..settings import DecodeSettings
from ..service import serving
from . import charts, render
from .endpoint import form_handler, pull, stopped_message
from .form import batch_methods

from ..service.gpu import gpu
from .readouts import plot
from .tabs import stop_tab

BATCH_DEFAULT = "retrieval"  # the Batch tab's method at first
BATCH_FIELDS = ("target", "batch_method", "batch_sizes", "batch_tokens")
MAX_BATCH = 64
# on a public server a batch (decoded whole, between two checks for Stop) stays short
PUBLIC_MAX_BATCH, PUBLIC_MAX_TOKENS = 8, 64


def batch_lesson_figure(record) -> dict:
    """Lesson 5's record (specviz.lessons.BatchSizes, a saved run's too) as the chart this tab draws live."""
    return charts.batch_figure(record.summary, record.device, record.method, record.costs)


class BatchTab:
    """Built in its own tab and as the Learn tab's lesson 5: prefix keeps the two copies' element ids apart,
    api_name names the first one's endpoint (None: private)."""

    def __init__(self, prefix: str = "sv-batch", api_name: str | None = "batch"):
        self.prefix, self.api_name = prefix, api_name

    def build(self, target, prompts: list[str], engine: dict):
        self.prompts = prompts
        gr.Markdown("The example prompts decoded in batches on this machine: one verify pass serves every "
                    "sequence of the batch. Where a forward at batch 1 is bound by reading the weights (a GPU), "
                    "checking drafts is nearly free; as the batch grows, the forward fills the device and extra "
                    "positions cost more: the speedup shrinks, and at some size speculation stops paying. Where the "
                    "arithmetic binds a forward already at batch 1 (a small CPU), drafts cost from the start. The "
                    "third chart shows which holds here: a verify pass's forward time over a plain step's, for the "
                    "same batch; the line under it says it in words.")
        with gr.Row():
            self.method = gr.Dropdown(list(batch_methods()), value=BATCH_DEFAULT, label="method",
                                      elem_id=f"{self.prefix}-method")
            self.sizes = gr.Textbox("1,2,4,8", label="batch sizes", elem_id=f"{self.prefix}-sizes")
            self.tokens = gr.Number(32, label="new tokens", precision=0, minimum=1, maximum=256,
                                    elem_id=f"{self.prefix}-tokens")
        with gr.Row():
            self.button = gr.Button("Measure", variant="primary", elem_id=self.prefix)
            self.stop = gr.Button("Stop", variant="stop", elem_id=f"{self.prefix}-stop")
        self.status = gr.HTML(label="batch status", elem_id=f"{self.prefix}-status")
        self.plot = gr.Plot(label="batch chart", elem_id=f"{self.prefix}-plot")
        naming = {"api_name": self.api_name} if self.api_name else {"api_visibility": "private"}
        stop_naming = {"api_name": f"{self.api_name}_stop"} if self.api_name else {"api_visibility": "private"}
        handler = form_handler(BATCH_FIELDS, self.on_measure, lambda m: {self.status: render.status_html(m, "error")})
        event = self.button.click(handler, [target, self.method, self.sizes, self.tokens], [self.status, self.plot],
                                  preprocess=False, **naming, **engine)
        self.stop.click(stop_tab, None, [self.status], cancels=[event], concurrency_limit=None, **stop_naming)
        return event

    def on_measure(self, form, state, cancel):
        batch_sizes = parse_batch_sizes(form.batch_sizes)
        largest = PUBLIC_MAX_BATCH if serving.profile().public else MAX_BATCH  # a batch is one uninterrupted stretch
        if max(batch_sizes) > largest:
            raise SpecvizError(f"batch sizes up to {largest} here, got {max(batch_sizes)}")
        if serving.profile().public and form.batch_tokens > PUBLIC_MAX_TOKENS:
            raise SpecvizError(f"new tokens up to {PUBLIC_MAX_TOKENS} here, got {form.batch_tokens}")
        if len(batch_sizes) > 8:
            raise SpecvizError(f"at most 8 batch sizes at once, got {len(batch_sizes)}")
        settings = DecodeSettings(max_new_tokens=form.batch_tokens, gamma=4).validate()
        yield {self.status: render.status_html(f"Loading {form.target}…", "info")}
        summary, device, costs = [], "", []
        for event in pull(gpu(batch_records)(form.target, form.batch_method, batch_sizes, settings, self.prompts),
                          cancel):
            if isinstance(event, events.Failed):
                yield {self.status: render.status_html(event.message, "error")}
                return
            if isinstance(event, events.Device):
                device = event.label
            if not isinstance(event, events.BatchSize):
                continue
            size, summary, costs = event.size, event.summary, event.costs
            yield {self.status: render.status_html(f"Measured batch {size}.", "info"),
                   self.plot: plot(charts.batch_figure(summary, device, form.batch_method, costs))}
        if cancel.is_set():
            yield {self.status: render.status_html(stopped_message(cancel), "warn")}
            return
        verdict = verdict_line(summary, form.batch_method, costs)
        yield {self.status: render.status_html(verdict, "warn" if BUSY in verdict or UNSETTLED in verdict else "ok"),
               self.plot: plot(charts.batch_figure(summary, device, form.batch_method, costs))}

