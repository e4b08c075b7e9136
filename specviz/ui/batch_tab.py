"""The Batch tab: the example prompts decoded in batches of several sizes on this machine, a method against
plain decoding of the same batches, so that a class sees where speculation stops paying as the batch grows
(batch.py, batch_bench.py). The cost curve beside it (the Cost curve tab) says why.

`draft` drafts with the draft model the Run tab picks (run_request.drafter_for: on the default target the
distilled one shipped for it); on another target, with the target itself. `draft (target itself)` always drafts
with the target: every draft is accepted, so what it loses against plain decoding is the verify pass's cost
alone."""
from __future__ import annotations

from collections.abc import Iterator

import gradio as gr

from ..api import batch_drafting, encode, make_proposer, warm_up
from ..engine.batch import decode_batch, forward_cost
from ..measure.batch_bench import batches_of, parse_batch_sizes, row_of, summarize_batches
from ..errors import SpecvizError
from ..lessons.batch_size import batch_sentence as verdict_line
from ..lessons.batch_size import prompts_for
from ..measure.plausibility import BUSY, UNSETTLED
from ..proposers.checkpoints import load_draft_model
from ..settings import DecodeSettings
from . import charts, render, serving
from .endpoint import form_handler, pull, stopped_message
from .form import SELF_DRAFT, batch_methods
from .form import message_of
from .gpu import gpu
from .engine_lock import ENGINE_LOCK
from .readouts import plot
from .run_request import drafter_for
from .serving import load_target
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

    @staticmethod
    def drafting(method: str, name: str, model):
        """What `method` batches with: a lookup proposer a row, or a draft model (api.batch_drafting); `draft` with
        the drafter chosen (the distilled one where none is), SELF_DRAFT with the target itself."""
        if method == SELF_DRAFT:
            return batch_drafting("draft", model, model)
        if method == "draft":
            chosen = drafter_for("draft", name, None)
            device = serving.placement().draft_device or str(model.device)
            draft = load_draft_model(chosen, model, device) if chosen else model
            return batch_drafting("draft", model, draft)
        return batch_drafting(method, model)

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
        for record in pull(gpu(batch_records)(form.target, form.batch_method, batch_sizes, settings, self.prompts),
                           cancel):
            if record[0] == "failed":
                yield {self.status: render.status_html(record[1], "error")}
                return
            if record[0] == "device":
                device = record[1]
            if record[0] != "size":
                continue
            _, size, summary, costs = record
            yield {self.status: render.status_html(f"Measured batch {size}.", "info"),
                   self.plot: plot(charts.batch_figure(summary, device, form.batch_method, costs))}
        if cancel.is_set():
            yield {self.status: render.status_html(stopped_message(cancel), "warn")}
            return
        verdict = verdict_line(summary, form.batch_method, costs)
        yield {self.status: render.status_html(verdict, "warn" if BUSY in verdict or UNSETTLED in verdict else "ok"),
               self.plot: plot(charts.batch_figure(summary, device, form.batch_method, costs))}


def batch_records(name: str, method: str, batch_sizes: list[int], settings: DecodeSettings,
                  prompts: list[str]) -> Iterator[tuple]:
    """The prompts decoded in batches of each size, plain and with `method`: ("device", label), then ("size",
    size, summary so far, forward costs so far) after each size, or ("failed", message). A GPU call; other users'
    runs interleave between its batches."""
    try:
        with serving.pool().using(name):
            model = load_target(name)
            ids = [encode(model, prompt) for prompt in prompts]
            drafting = BatchTab.drafting(method, name, model)
            yield ("device", f"{model.device.type} ({model.describe()})")
            rows, costs = [], []
            # every size decodes the first prompts of one list: as many as the largest batch (repeated where there
            # are fewer), at least a few at the small sizes (prompts_for), as the lesson does
            chosen = batches_of(ids, max(batch_sizes))[0]
            if 1 in batch_sizes:  # batch 1 runs the single-sequence loop: on a GPU its graphs, before it is timed
                with ENGINE_LOCK:
                    warm_up(model, settings.gamma + 1, min(max(map(len, chosen)) + settings.max_new_tokens
                                                           + settings.gamma + 2, model.context_length))
            for size in batch_sizes:
                for batch in batches_of(prompts_for(chosen, size), size):
                    plain = None
                    for spec in ("plain", method):
                        with ENGINE_LOCK:  # a batch at a time, so that other users' runs interleave
                            run = decode_batch(model, drafting if spec == method else
                                               (lambda: make_proposer("plain", model)), batch, settings)
                        plain = plain or run
                        rows.append(row_of(run, plain, spec, size))
                        yield ("batch",)
                with ENGINE_LOCK:  # why: a verify pass of gamma + 1 positions against a plain step, this batch
                    costs.append({"batch_size": size, "positions": settings.gamma + 1,
                                  "ratio": forward_cost(model, size, settings.gamma + 1) / forward_cost(model, size,
                                                                                                        1)})
                yield ("size", size, summarize_batches(rows), list(costs))
    except Exception as error:
        yield ("failed", message_of(error))
