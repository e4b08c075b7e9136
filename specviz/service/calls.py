"""What the page and the endpoints ask the engine to compute beside a run (a comparison of methods, the cost
curve, a batch measurement, /speculate, a lesson): each a GPU call of picklable arguments that takes its models from
the pool and yields events (specviz.service.events), under the engine lock a step or a record at a time, so that
other users' runs interleave; closing it ends it at its next event."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator

from .. import api, lessons
from ..api import batch_drafting, check_drafter, encode, first_difference, make_proposer, warm_up
from ..engine.batch import decode_batch, forward_cost
from ..engine.run import SpeculativeRun
from ..errors import MissingDrafterError, SpecvizError, message_of
from ..lessons.batch_size import prompts_for
from ..measure.batch_bench import batches_of, row_of, summarize_batches
from ..measure.cost_curve import measure_cost_curve
from ..measure.plausibility import drafting_share, speedup_doubt
from ..proposers import PlainProposer
from ..proposers.checkpoints import load_draft_model
from ..records.metrics import running_metrics
from ..records.oracle import oracle_figures
from ..settings import DecodeSettings
from . import events, serving
from .engine_lock import ENGINE_LOCK
from .run_request import RunRequest, drafter_for
from .run_setup import RunSetup, capture_bound, encode_prompt, load_models
from .serving import load_target
from .stepped_runs import StepLog, SteppedRun, engine_result

log = logging.getLogger(__name__)

SKIPPED_DRAFT = "Skipped draft: it needs a drafter (choose one in the Run tab's settings)."
SELF_DRAFT = "draft (target itself)"  # the Batch tab's `draft` with the target drafting for itself


def under_the_lock(items: Iterator, event: Callable) -> Iterator[events.Event]:
    """The items of a measurement as events, each item computed under the engine lock (other users' steps
    interleave between them); closing this closes the measurement too (yield from hands a close on)."""
    try:
        while True:
            with ENGINE_LOCK:
                item = next(items, None)
            if item is None:
                return
            yield event(item)
    finally:
        items.close()


# the Compare methods and Cost curve tabs

def compare_records(request: RunRequest, methods: tuple[str, ...]) -> Iterator[events.Event]:
    """Plain decoding, then each method, of one prompt: Progress after every step, a Row of figures after each
    run, Skipped for a method that cannot run, or Failed (specviz.service.events). A
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
                        yield events.Progress(method, stepped.emitted)
                finally:
                    stepped.close()
                return stepped

            plain = None
            for method in ("plain", *methods):
                try:
                    check_drafter(method, draft)
                except MissingDrafterError:
                    yield events.Skipped(SKIPPED_DRAFT)
                    continue
                try:
                    stepped = yield from timed(method)
                except SpecvizError as error:
                    yield events.Skipped(f"Skipped {method}: {error}")
                    continue
                baseline = plain
                if method == "plain":
                    plain = baseline = stepped
                elif compare_doubt(baseline, stepped):  # measured again, the pair back to back
                    baseline = yield from timed("plain")
                    stepped = yield from timed(method)
                yield events.Row(compare_figures(method, stepped, baseline, settings))
    except Exception as error:
        yield events.Failed(message_of(error))


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
    metrics = running_metrics(run.result.steps, run.engine_wall, run.result.metrics.prefill_seconds)
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


def cost_records(name: str) -> Iterator[events.Event]:
    """The target's forward time against positions and batch size: Device, then a Point at a time (other users'
    runs interleave between them), or Failed (specviz.service.events). A GPU call."""
    try:
        with serving.pool().using(name):
            model = load_target(name)
            yield events.Device(f"{model.device.type} ({model.describe()}, {str(model.dtype).replace('torch.', '')})")
            yield from under_the_lock(measure_cost_curve(model, as_measured=True), events.Point)
    except Exception as error:
        yield events.Failed(message_of(error))


# /speculate

def speculate_records(request: RunRequest) -> Iterator[events.Event]:
    """Plain decoding, then the method, of one prompt, a step at a time under the engine lock (as the Run tab's
    runs: other users' steps interleave, so a long request slows the others by a share, not by its length; its
    times are on engine time, stepped_runs.engine_result): a Beat after every step, then the Report (its JSON), or
    Failed (specviz.service.events). A GPU call: it runs where gpu() puts it, and closing it ends it at its next
    step."""
    try:
        with serving.pool().using(request.target, request.draft):
            target, draft = load_models(request)
            setup = RunSetup.make(dataclasses.replace(request, compare_plain=False), target, draft)  # one at a time
            setup.prepare(capture_bound())  # within a ZeroGPU call's bound, else it goes on without graphs
            prompt_ids, settings = setup.prompt_ids, request.settings
            results = []
            for each in (PlainProposer(), setup.proposer):
                stepped = SteppedRun(SpeculativeRun(target, each, prompt_ids, settings, request.prompt,
                                                    options=setup.options))
                try:
                    while not stepped.done:
                        stepped.advance()
                        yield events.Beat()
                finally:
                    stepped.close()
                results.append(engine_result(stepped))
        yield events.Report(api.Report(results[1], results[0]).to_dict())
    except Exception as error:
        if not isinstance(error, SpecvizError):
            log.exception("/speculate failed")
        yield events.Failed(message_of(error))


# the Batch tab and lesson 5

def drafting_for(method: str, name: str, model):
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


def batch_records(name: str, method: str, batch_sizes: list[int], settings: DecodeSettings,
                  prompts: list[str]) -> Iterator[events.Event]:
    """The prompts decoded in batches of each size, plain and with `method`: Device, a Beat after each batch,
    then a BatchSize (the summary and forward costs so far) after each size, or Failed (specviz.service.events).
    A GPU call; other users' runs interleave between its batches."""
    try:
        with serving.pool().using(name):
            model = load_target(name)
            ids = [encode(model, prompt) for prompt in prompts]
            drafting = drafting_for(method, name, model)
            yield events.Device(f"{model.device.type} ({model.describe()})")
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
                        yield events.Beat()
                with ENGINE_LOCK:  # why: a verify pass of gamma + 1 positions against a plain step, this batch
                    ratio = forward_cost(model, size, settings.gamma + 1) / forward_cost(model, size, 1)
                    costs.append({"batch_size": size, "positions": settings.gamma + 1, "ratio": ratio})
                yield events.BatchSize(size, summarize_batches(rows), list(costs))
    except Exception as error:
        yield events.Failed(message_of(error))


# the Learn tab's lessons

def lesson_records(name: str, start: Callable, prompt: str | None = None) -> Iterator[events.Event]:
    """A lesson measured on the target `name`: a Beat once the model is loaded, then a LessonRecord for each
    record start(model) yields (one at a time under the engine lock, so that other users' steps interleave), or
    Failed (specviz.service.events).
    A GPU call: `start` must pickle (a module-level function, or a functools.partial of one)."""
    try:
        with serving.pool().using(name):
            model = load_target(name)
            if prompt is not None:  # a caller's prompt: its tokens within the profile's limit
                encode_prompt(model, prompt)
            yield events.Beat()
            yield from under_the_lock(start(model), events.LessonRecord)
    except Exception as error:
        yield events.Failed(message_of(error))


def exact_records(model, prompt: str, method: str, max_new: int, runs: int, temperature: float) -> Iterator:
    """The exactness lesson as the tab runs it: the greedy pair, then the histograms as they fill."""
    yield lessons.greedy_side_by_side(model, prompt, method, max_new_tokens=max_new)
    yield from lessons.distribution(model, prompt, method, runs, temperature)
