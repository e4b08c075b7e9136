"""A LiveRun as widget values: the token list, the header, the summary, the status line and the trace file.
Small functions of the run's records, called by the app's frames."""
from __future__ import annotations

import json
import tempfile
import time
import weakref
from dataclasses import asdict, replace
from pathlib import Path

from gradio.components.plot import PlotData

from .. import methods as registry
from ..api import first_difference, logit_margin, weights_come_from
from ..measure.plausibility import noise_note
from ..records.schema import RunResult, StepRecord, TokenRecord
from . import render, view
from .tree_view import tree_svg
from ..service.live import BASELINE, FAILED, PAUSED, READY, RUNNING, STOPPED, LiveRun
from ..service.stepped_runs import SteppedRun


def plot(figure: dict) -> PlotData:
    """A plotly figure dict (charts.py) as gr.Plot's value, without building plotly objects."""
    return PlotData(type="plotly", plot=json.dumps(figure))


def tokens_of(steps: list[StepRecord], tokenizer=None) -> list[TokenRecord]:
    """The shown tokens in order. A special token (end of turn, chat markup) decodes to nothing in the output
    text; the view shows its name instead, so that a drafted or emitted one can be seen and hovered."""
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    tokens = []
    for step in steps:
        for token in step.tokens:
            if not token.text and token.id in special:
                token = replace(token, text=tokenizer.convert_ids_to_tokens(token.id))
            tokens.append(token)
    return tokens


_step_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a run's rendered steps, while it lives


def token_view(run: LiveRun, cursor: int | None = None, upto: int | None = None, story: str = "") -> str:
    """The token view of the run: each step's tokens rendered once, when the step is new (render.StepGroups),
    so that a streamed update costs the engine's thread only the steps it has not seen."""
    groups = _step_groups.get(run)
    if groups is None:
        groups = _step_groups[run] = render.StepGroups(getattr(run.tokenizer, "all_special_ids", None) or ())
    steps = run.speculative.steps
    for step in steps[len(groups):]:
        groups.add(tokens_of([step], run.tokenizer), tree_svg(step))
    return render.token_view_html([], run.request.prompt, run_header(run), sampling=not run.request.settings.greedy,
                                  story=story, spans=groups.html(current_step=cursor, upto_step=upto))


def token_text(tokenizer):
    def text(token_id: int) -> str:
        if tokenizer is None:
            return f"<{token_id}>"
        return tokenizer.decode([token_id])
    return text


def run_header(run: LiveRun) -> str:
    request, s = run.request, run.request.settings
    sampling = "greedy" if s.greedy else f"sampling T={s.temperature:g}, top-p={s.top_p:g}, seed={s.seed}"
    drafter = f", drafter {request.draft}" if request.draft else ""
    drafting_trees = run.speculative.settings.tree  # the engine's: 0 where the method or runner drafts chains
    tree = f" · draft tree of up to {s.tree} tokens" if drafting_trees else ""
    return (f"target {run.target_label}{drafter} · method {request.method} · γ = {s.gamma}{tree} · {sampling} · "
            f"{run.device_label}")


def engine_metrics(stepped: SteppedRun):
    if stepped.done:
        m = stepped.result.metrics
        return view.running_metrics(stepped.result.steps, stepped.engine_wall, m.prefill_seconds)
    if not stepped.steps:
        return None
    return view.running_metrics(stepped.steps, stepped.engine_elapsed(len(stepped.steps) - 1))


def summary_of(run: LiveRun) -> str:
    spec, plain = run.speculative, run.plain
    metrics = engine_metrics(spec)
    if metrics is None:
        return ""
    plain_metrics = engine_metrics(plain) if plain is not None and plain.done else None
    speedup = run.speedup
    identical, difference, bit_for_bit = None, None, False
    sampling = not run.request.settings.greedy
    if spec.done and plain is not None and plain.done:
        identical, difference, bit_for_bit = compared(spec.result, plain.result)
    theory = view.theory(metrics, spec.steps, run.request.settings.gamma, speedup)
    idle = spec.idle_seconds + (plain.idle_seconds if plain is not None else 0.0)
    doubt = run.doubt
    return render.summary_html(metrics, run.request.method, plain_metrics, speedup, identical, difference,
                               sampling, idle, spec.done, theory, noise_note(doubt) if doubt else None, bit_for_bit,
                               waits_note(plain is not None, run.paused_ever, isinstance(run, LiveRun)))


def compared(spec: RunResult, plain: RunResult) -> tuple[bool, view.FirstDifference | None, bool]:
    """A finished run beside its plain baseline: (identical, the first difference, both runs' forwards in the
    exact mode). The difference carries plain's logit margin there, the dtype and the mode, which say whether
    it can be rounding (view.difference_cause)."""
    index = first_difference(spec.token_ids, plain.token_ids)
    exact = bool(spec.settings.get("exact_forward")) and bool(plain.settings.get("exact_forward"))
    emitted = lambda result: [t.text for t in result.tokens if t.kind.value != "rejected"]  # noqa: E731
    difference = view.first_difference_texts(index, emitted(spec), emitted(plain))
    if difference is not None:
        difference.margin = logit_margin(plain.steps, index)
        difference.dtype = str(plain.settings.get("dtype", ""))
        difference.exact = exact
        difference.gpu = str(plain.settings.get("device", "")).startswith("cuda")
    return index is None, difference, exact


def waits_note(raced: bool, paused: bool, drawn_here: bool) -> str:
    """What the excluded waits were: each run's time between its own steps. raced: the two runs took turns;
    paused: the run was paused (step mode, Pause); drawn_here: the page's updates held the engine (LiveRun.hold:
    a run computed in a GPU call is not held)."""
    causes = [cause for cause, happened in (("the other run's turns in the race", raced),
                                            ("the page drawing its updates", drawn_here), ("pauses", paused))
              if happened]
    listed = ", ".join(causes[:-1]) + " and " + causes[-1] if len(causes) > 1 else "".join(causes)
    if not listed:
        return "each run's time between its own steps (other users' steps)"
    return f"each run's time between its own steps ({listed}; other users' steps, if any)"


def headline(run: LiveRun) -> str:
    """The finished run's result in one line, for the status line in the first screen (the summary card is
    below the fold on a projector): the speedup and tau, and on a second line the note when the speedup failed
    its check (specviz.measure.plausibility)."""
    spec = run.speculative
    if not spec.done:
        return ""
    tau = f"τ = {spec.result.metrics.mean_accepted_length:.2f} tokens per step"
    speedup = run.speedup
    if speedup is None:
        return tau
    doubt = run.doubt
    text = f"{speedup:.2f}× the speed of plain decoding{' (noisy)' if doubt else ''} · {tau}"
    return text + (f"\n{noise_note(doubt)}" if doubt else "")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def steps_span(n: int) -> str:
    """A run's n steps as the page numbers them (from 0, as the slider, the charts and the step sentences do)."""
    return "step 0" if n == 1 else f"steps 0 to {n - 1}"


def running_text(run) -> str:
    """What the worker does now: a speculative step, plain decoding's turn in the race, or (step mode) plain
    decoding catching up before the pause."""
    n = len(run.speculative.steps)
    if getattr(run, "pausing", False) and n:
        return (f"Step {n - 1} done; plain decoding catches up to the same point (the race), then the run pauses "
                f"after step {n - 1}…")
    if getattr(run, "turn", "speculative") == "plain" and run.plain is not None and n:
        return (f"Running: {plural(n, 'step')} done; plain decoding's turn in the race "
                f"({plural(run.plain.emitted, 'token')} of {run.speculative.emitted})…")
    return f"Running: step {n}…"


def running_state(run) -> str:
    """A going run's state for the page's controls: "stepping" under Next step (Next clicked again queues a
    step), else "running"."""
    return "stepping" if getattr(run, "stepping", False) else "running"


def status_of(run: LiveRun, session_cursor: int | None = None) -> str:
    n = len(run.speculative.steps)
    if run.phase == FAILED:
        return render.status_html(f"The run failed: {run.error}", "error", "none")
    if run.phase == STOPPED:
        return render.status_html(f"Stopped after {plural(n, 'step')}. Press Run to start again.", "warn", "stopped")
    if run.phase == READY:
        return render.status_html("Step mode: paused before the first step. Press Next step to run one "
                                  "draft-verify-accept step, Resume to run the rest.", "info", "paused")
    if run.phase == PAUSED:
        return render.status_html(f"Paused after step {n - 1}. Next step runs one more; Resume runs the rest; "
                                  "Stop ends the run.", "info", "paused")
    if run.phase == BASELINE:
        done = len(run.plain.steps) if run.plain is not None else 0
        return render.status_html(f"Speculative run done; now plain decoding of the same prompt for the baseline "
                                  f"({plural(done, 'token')} so far).", "info", running_state(run))
    if run.phase == RUNNING:
        eager = preparation_note(run, eager_only=True)
        return render.status_html(running_text(run) + (f" It {eager}." if eager else ""), "info", running_state(run))
    result = headline(run)
    result = f" · {result}" if result else ""
    note = preparation_note(run)
    note = f"\n{note[0].upper()}{note[1:]}." if note else ""
    if session_cursor is not None:
        return render.status_html(f"Showing step {session_cursor} ({steps_span(n)}, {plural(n, 'step')} in all)"
                                  f"{result}{note}", "ok", "done")
    return render.status_html(f"Done: {plural(n, 'step')}{result}{note}", "ok", "done")


def replay_status(run: LiveRun, k: int) -> str:
    """The status line while Replay shows step k, and once it has shown the last one."""
    n = len(run.speculative.steps)
    result = headline(run)
    result = f" · {result}" if result else ""
    if k < n - 1:
        return render.status_html(f"Replaying: step {k} ({steps_span(n)})…", "info", "replaying")
    return render.status_html(f"Replay done: all {plural(n, 'step')} shown ({steps_span(n)}){result}", "ok", "done")


TRACE_FOLDER = Path(tempfile.gettempdir()) / "specviz-traces"
TRACE_MAX_AGE = 3600  # seconds a trace file is kept on the server


def trace_file(run: LiveRun) -> str | None:
    """The run's full trace as JSON (Report.to_dict(), as `specviz generate --json --compare-plain` writes
    it, plus the engine-time figures the app shows); a stopped run's steps so far. Written once per run;
    files older than TRACE_MAX_AGE are removed."""
    if run.trace_path is not None and Path(run.trace_path).is_file():
        return run.trace_path
    report = run.report()
    if report is not None:
        data = report.to_dict()
        # the speeds the page states: on engine time (each run's own steps; not the other run's turns, pauses or
        # other users' steps, which its wall time holds)
        data["metrics"] = asdict(engine_metrics(run.speculative))
        if run.plain is not None and run.plain.done and "plain" in data:
            data["plain"].update(wall_seconds=run.plain.engine_wall,
                                 tokens_per_second=run.plain.engine_tokens_per_second)
            data["speedup"] = run.speedup
        data["engine_time"] = {"idle_seconds": run.speculative.idle_seconds,
                               "tokens_per_second": run.speculative.engine_tokens_per_second,
                               "plain_tokens_per_second": run.plain.engine_tokens_per_second if run.plain else None,
                               "speedup": run.speedup, "speedup_doubt": run.doubt}
    elif run.speculative.steps:
        data = {"method": run.request.method, "prompt": run.request.prompt, "stopped": True,
                "steps": [s.to_dict() for s in run.speculative.steps]}
    else:
        return None
    TRACE_FOLDER.mkdir(exist_ok=True)
    for stale in TRACE_FOLDER.glob("specviz-trace-*.json"):
        if time.time() - stale.stat().st_mtime > TRACE_MAX_AGE:
            stale.unlink(missing_ok=True)
    path = TRACE_FOLDER / f"specviz-trace-{run.id}.json"
    path.write_text(json.dumps(data, ensure_ascii=False))
    run.trace_path = str(path)
    return run.trace_path


def loading_message(names: list[str | None], seconds: float, preparing: bool, device: str | None = None) -> str:
    """The status line while a run's models load (names: the target and the drafter or None), then while the
    run warms up on `device` (its type: "cuda", "cpu"...; None: not known here)."""
    if preparing:
        if device == "cuda":
            why = "on a GPU the first run of a method captures CUDA graphs and compiles: up to a minute"
        else:
            why = "a first short run of the model, untimed, so that the measured run does not start cold"
        return f"Preparing the run… {seconds:.0f} s ({why})"
    names = [n for n in names if n]
    made = [n for n in names if weights_come_from(n) == "made"]  # random weights of a stated shape
    hub = [n for n in names if weights_come_from(n) == "hub"]
    notes = ([f"{' and '.join(made)}: random weights of that shape are made here, nothing is downloaded"] if made
             else []) + ([f"{' and '.join(hub)}: a first load downloads it from the Hub"] if hub else [])
    note = f" ({'; '.join(notes)})" if notes else ""
    return f"Loading {' and '.join(names)}… {seconds:.0f} s{note}"


def preparing_message(fresh_worker: bool, seconds: float, bound: float) -> str:
    """The status line while a ZeroGPU worker captures the CUDA graphs of a run's shapes (gpu_worker.py)."""
    which = "first run on this worker" if fresh_worker else "first run of these settings on this worker"
    return (f"Preparing the GPU ({which})… {seconds:.0f} s: capturing CUDA graphs, at most {bound:.0f} s; "
            "not counted in the run's timings")


def preparation_note(run, eager_only: bool = False) -> str:
    """What the status line adds about how the run was prepared: that it runs without CUDA graphs and why, or
    (eager_only False) what preparing took on a GPU worker; "" for nothing to say (a run without a Preparation,
    one on a CPU)."""
    preparation = getattr(run, "preparation", None)
    if preparation is None or (eager_only and not preparation.eager):
        return ""
    return preparation.sentence()


def quoted(text: str) -> str:
    """A token inside a sentence: trimmed, whitespace made visible, in quotes."""
    shown = text.strip() or text.replace(" ", "·").replace("\t", "⇥")
    return f"‘{shown.replace(chr(10), '⏎')}’"


def doubt(step: StepRecord) -> str:
    """Why a draft model's chain is short: it stopped after a token it doubted (the draft stop)."""
    if not step.doubted:
        return ""
    q = step.positions[-1].q if step.positions else None
    sure = f"it gave {quoted(step.positions[-1].text)} only {q:.0%}" if q is not None else "it doubted its last one"
    return f" and stopped there: {sure}, under the draft stop"


def drafts_at_once(run: LiveRun) -> bool:
    """Whether the run's drafter writes a step's whole draft in one forward (the registry's drafts_at_once); a
    method the registry does not hold (a record read back from elsewhere) says nothing."""
    name = run.request.method
    return name in registry.names() and registry.method(name).drafts_at_once


def at_once_note(step: StepRecord) -> str:
    """How a block or heads drafter's step came: every draft from one forward, and what that forward took."""
    if step.gamma < 2:
        return ""
    return f", all at once from one drafting forward ({step.draft_ms:.1f} ms)"


def step_story(step: StepRecord | None, sampling: bool, at_once: bool = False) -> str:
    """One step in plain words: what was drafted (at_once: all from one drafting forward), how much the target
    kept, what it wrote itself."""
    if step is None:
        return ""
    drawn = quoted(step.next_token.text)
    if step.gamma == 0:
        return f"Step {step.index}: no draft; the target wrote {drawn} itself, as plain decoding does."
    tree = f" (a tree of {step.tree_size} candidates)" if step.tree_size else ""
    proposed = f"Step {step.index}: the drafter proposed {step.gamma} token{'s' if step.gamma > 1 else ''}{tree}"
    proposed += at_once_note(step) if at_once else ""
    proposed += doubt(step) + "; "
    agreed = ("the target agreed with none" if step.n_accepted == 0 else
              "the target agreed with the first one" if step.n_accepted == 1 else
              "the target agreed with all of them" if step.n_accepted == step.gamma else
              f"the target agreed with the first {step.n_accepted}")
    if step.emitted <= step.n_accepted:  # the run ended inside the step: end of text or the token limit
        return proposed + f"{agreed}, and the output ends there."
    if step.n_accepted == step.gamma:
        return proposed + f"{agreed} and added {drawn} (the bonus token)."
    rejected = next((t for t in step.tokens if t.kind.value == "rejected"), None)
    instead = f"drew {drawn} from the residual" if sampling else f"put its own choice {drawn} in its place"
    if rejected is None:
        return proposed + f"{agreed}, then wrote {drawn}."
    return proposed + f"{agreed}; it rejected {quoted(rejected.text)} and {instead}."
