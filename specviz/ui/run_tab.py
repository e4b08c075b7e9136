"""The Run tab: its widgets and events, and the handler that starts a run.

Handlers never hold models (they live in specviz.models.loading' process-wide registry) or engine state in gr.State
(it is deep-copied per session): a session's run lives in sessions.py's table, keyed by gradio's
session hash. The run's frames are run_view.py's, the controls on a run that exists run_controls.py's."""
from __future__ import annotations

import threading
import time

import gradio as gr

from ..api import check_drafter
from ..errors import MissingDrafterError, SpecvizError
from ..api import DEFAULT_MODEL, DISTILLED
from ..options import EngineOptions
from ..methods import METHODS, tree_drafting
from ..service.public import preset_bytes
from ..service import serving
from . import render
from .admission import REPLAY, REPLAYS
from .assets import example_prompts, examples
from .cancel import Cancel
from .endpoint import form_handler
from ..settings import BOUNDS
from .form import MAX_NEW_TOKENS, Form
from ..service.gpu import CAPTURE_SECONDS, forks, gpu
from ..service.live import FAILED, LiveRun
from ..service.recorded_runs import RecordedRun, run_records
from ..service.run_request import RunRequest, drafter_for, model_name
from .sessions import Session, remember_width, session_key
from ..service.run_setup import load_models
from .readouts import loading_message, preparing_message
from .run_controls import RunControls

RUN_TAB = "run"  # the Run tab's id in the app's gr.Tabs: "Open in the Run tab" selects it by id, not by its label
SETTLE = 0.15  # seconds from a Run's request to its first step: a browser on the same cores draws meanwhile
# the inputs of an event, passed on once the browser has drawn two frames: the page's last update is on the
# screen (its style, layout and paint done) before the request leaves, so that a browser on the server's cores
# does not draw it while the run it asks for starts. A hidden tab draws no frames: then after 0.2 s
AFTER_PAINT = ("(...inputs) => new Promise(go => { setTimeout(() => go(inputs), 200); "
               "requestAnimationFrame(() => requestAnimationFrame(() => go(inputs))); })")
NARROW_WIDTH = 640  # px: below it, a phone's layout (as assets/specviz.css's @media rule)

TARGETS = [("default: SmolLM2-135M-Instruct (offline)", DEFAULT_MODEL),
           ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct"),
           ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
           ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")]
DRAFTS = [("none", "none"), ("distilled: 3 layers distilled from the default target (offline)", DISTILLED),
          ("default: SmolLM2-135M-Instruct (offline)", DEFAULT_MODEL),
          ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
          ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
          ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct")]
PAIRS = {  # label: (target, drafter)
    "SmolLM2-135M drafts for SmolLM2-1.7B": ("HuggingFaceTB/SmolLM2-1.7B-Instruct",
                                             "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "Qwen2.5-0.5B drafts for Qwen2.5-7B": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    "Llama-3.2-1B drafts for Llama-3.1-8B": ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
}
# the Run tab's widgets' values, in the order of its event's inputs (named as form.FIELDS and the /run API)
RUN_FIELDS = ("prompt", "method", "target", "draft", "gamma", "temperature", "top_p", "max_new_tokens", "seed",
              "compare_plain", "step_mode", "tree", "draft_stop", "exact")


def offered(choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The model choices this server offers: all for a local user; on a public server those its profile allows
    (a preset that cannot fit its memory is left out), and the owner's additions."""
    profile = serving.profile()
    kept = [(label, value) for label, value in choices if value == "none" or profile.offers(value)]
    return kept + [(extra, extra) for extra in sorted(profile.extra_models) if extra not in {v for _, v in kept}]


def offered_pairs() -> dict[str, tuple[str, str]]:
    """The preset pairs whose target and drafter fit this server's memory together."""
    profile = serving.profile()
    if not profile.public:
        return dict(PAIRS)
    return {label: pair for label, pair in PAIRS.items()
            if all(profile.offers(name) for name in pair)
            and (profile.memory_budget is None or preset_bytes(pair, profile.dtype_bytes) <= profile.memory_budget)}


EXACT_INFO = ("on a GPU: each position of a verify pass computed as plain decoding computes it, so greedy output "
              "equals plain bit for bit (docs/exactness.md); a CPU needs no such mode")
READING_MODES = [("answer", "answer"), ("drafts", "drafts"), ("steps", "steps")]
# the token view's reading mode and presentation mode are classes on the page: switching needs no server
# the run controls' state (assets/specviz.css): the latest status line that names one; a line that names none
# (a note such as "Pausing after the current step…") leaves it as it was
# A number typed outside a slider's range: the browser's slider would send its end while its box still showed what
# was typed. Before the slider reads it (capture phase), the box is set to the end and a line under it says so.
RANGE_SCRIPT = ("document.addEventListener('change', (e) => { const box = e.target; "
                "if (!(box instanceof HTMLInputElement) || box.type !== 'number' || box.min === '' || box.max === '') "
                "return; "
                "const typed = parseFloat(box.value), low = parseFloat(box.min), high = parseFloat(box.max); "
                "if (!(typed < low || typed > high)) return; "
                "const used = typed < low ? low : high; box.value = String(used); "
                "box.dispatchEvent(new Event('input', {bubbles: true})); "
                "const block = box.closest('.block') || box.parentElement; "
                "const name = (block.querySelector('[data-testid=\"block-info\"], label') || {}).textContent || 'this "
                "setting'; "
                "let note = block.querySelector('.sv-range-note'); "
                "if (!note) { note = document.createElement('div'); note.className = 'sv-range-note'; "
                "note.setAttribute('role', 'status'); block.appendChild(note); } "
                "note.textContent = `${name.trim()} takes ${low} to ${high}: ${typed} was set to ${used}.`; }, true);"
                # an error (an empty prompt, a refused model) is brought into view where it landed below the screen
                "let svShownError = null; new MutationObserver(() => { "
                "const error = document.querySelector('#sv-status .sv-error'); "
                "if (error && error !== svShownError) { svShownError = error; const box = "
                "error.getBoundingClientRect(); "
                "if (box.top < 0 || box.bottom > window.innerHeight) error.scrollIntoView({block: 'center'}); } })"
                ".observe(document.body, {childList: true, subtree: true});")
RUN_STATE_SCRIPT = ("new MutationObserver(() => { const line = document.querySelector('#sv-status [data-sv-run]'); "
                    "if (line && document.body.dataset.svRun !== line.dataset.svRun) "
                    "document.body.dataset.svRun = line.dataset.svRun; })"
                    ".observe(document.body, {childList: true, subtree: true});")


class RunTab(RunControls):
    """Builds the Run tab and holds its components, so that handlers can name their outputs."""

    def __init__(self):
        # the handlers as gradio calls them: their parameters are form fields, read at the boundary
        self.on_run = form_handler(RUN_FIELDS, self.handle_run, self.show_error,
                                   defaults={"tree": 0, "draft_stop": 0, "exact": None})
        # the controls start nothing new: they make no session (a flood of them pushes no one's out)
        self.on_resume = form_handler((), self.handle_resume, self.show_error, creates=False)
        self.on_next = form_handler((), self.handle_next, self.show_error, creates=False)
        self.on_replay = form_handler(("seconds_per_step",), self.handle_replay, self.show_error, creates=False)
        self.on_inspect = form_handler(("step",), self.handle_inspect, _raise, creates=False)

    # ---- handlers: each takes the Form read at the boundary (endpoint.form_handler), its session and its stop
    # signal; an error it raises is shown in the status line
    def on_clear(self):
        """The view emptied for a new run (the run itself follows, in its own event)."""
        return self.blank(render.status_html("Starting…", "info", "loading"))

    def show_error(self, message: str) -> dict:
        return self.blank(render.status_html(message, "error", "none"))

    def handle_run(self, form: Form, state: Session, cancel: Cancel):
        if state.run is not None:
            state.run.stop()
        state.run, state.cursor, state.replaying = None, None, False
        draft_name = drafter_for(form.method, form.target, form.draft)
        try:
            check_drafter(form.method, draft_name)  # the engine's check, before anything loads
        except MissingDrafterError:  # said as the page offers it
            raise MissingDrafterError("the draft method needs a drafter: pick one in the drafter list (or a preset "
                                      "pair)" + ("" if serving.profile().public
                                                 else ", or type a Hub id, a folder or a "
                                                 ".gguf file")) from None
        baseline = form.compare_plain and form.method != "plain"  # plain against itself would be no comparison
        run_request = RunRequest(form.prompt, form.method, form.target, draft_name, form.settings, baseline, form.exact)
        if forks():
            yield from self._run_recorded(run_request, state, cancel, form.step_mode)
            return
        loaded: dict = {}

        def load():  # the models, then the run (on a GPU its warm-up captures graphs and compiles)
            try:
                loaded["models"] = load_models(run_request)
                run = loaded["run"] = LiveRun(run_request, *loaded["models"])
                if cancel.is_set():  # the handler ended while the models loaded: nobody will show this run
                    run.stop()
            except Exception as error:  # shown to the user below; the app stays up
                loaded["error"] = error

        job = threading.Thread(target=load, daemon=True)
        started = time.monotonic()
        job.start()
        try:
            # no update before the load has taken a while: the page was cleared before it asked for the run, and
            # a browser on the same machine spends tens of ms on any update, which would land on the run's first
            # steps (the prefill is in its measured time)
            while job.is_alive() and not cancel.is_set():
                job.join(0.5)
                if job.is_alive():  # a load that ends within the wait sends no update: each costs the browser
                    models = loaded.get("models")
                    message = loading_message([run_request.target, run_request.draft], time.monotonic() - started,
                                              models is not None, models[0].device.type if models else None)
                    yield {self.status: render.status_html(message, "info", "loading")}
            if cancel.is_set() and "run" not in loaded:
                yield self.blank(render.status_html(cancel.reason or "Stopped while the models loaded.", "warn",
                                                    "none"))
                return
            if "error" in loaded:
                raise loaded["error"]
            run = state.run = loaded["run"]
            if cancel.is_set():  # Stop was pressed while the models loaded
                run.stop()
                yield self.frame(run, narrow=state.narrow)
                return
            if form.step_mode:
                yield self.frame(run, narrow=state.narrow)
                return
            # the page handles the event's first messages (its start, gradio's status) while the run would start
            time.sleep(max(0.0, SETTLE - (time.monotonic() - started)))
            run.start()
            yield from self.stream(run, cancel, narrow=state.narrow)
        finally:
            run = loaded.get("run")
            if run is not None and (run.active or state.run is not run):  # cancelled, superseded or left behind
                run.stop()

    def _run_recorded(self, run_request: RunRequest, state: Session, cancel: Cancel, step_mode: bool):
        """The run computed in one GPU call (ZeroGPU): its records stream in here and stay here, so that step
        mode, Replay, the inspector and Stop never need the process that computed it."""
        run = state.run = RecordedRun(run_request, gpu(run_records)(run_request))
        started = time.monotonic()
        try:
            while not run.started.wait(0.5):
                if cancel.is_set():
                    run.stop()
                    break
                if run.preparing_since is not None:  # the worker captures this run's graphs (gpu_worker.py)
                    message = preparing_message(run.fresh_worker, time.monotonic() - run.preparing_since,
                                                CAPTURE_SECONDS)
                else:
                    message = loading_message([run_request.target, run_request.draft], time.monotonic() - started,
                                              False)
                yield {self.status: render.status_html(message, "info", "loading")}
            if run.phase == FAILED and not run.speculative.steps:
                state.run = None
                raise SpecvizError(run.error or "the run could not start")
            if step_mode:  # computed whole, then walked through here one step at a time (Next step)
                while run.active and not cancel.is_set():
                    time.sleep(0.5)
                    yield {self.status: render.status_html(
                        f"Computing the run for step mode: {len(run.speculative.steps)} steps so far…", "info")}
                state.cursor = 0 if run.speculative.steps else None
                yield self.frame(run, cursor=state.cursor, upto=state.cursor, narrow=state.narrow)
                return
            yield from self.stream(run, cancel, narrow=state.narrow)
        finally:
            if cancel.is_set() or state.run is not run:
                run.stop()

    def on_width(self, width, request: gr.Request):
        """The page's width, sent once as it loads: a phone's page gets the step charts stacked (a 2x2 grid
        leaves ~120 px a panel at 400 px). A page resized later keeps the layout it loaded with."""
        remember_width(session_key(request), bool(width) and float(width) < NARROW_WIDTH)

    def on_method(self, method, target, draft):
        """A drafter that is the target itself (the `draft` method's self-drafting demo) is dropped when the
        method changes: adaptive would otherwise keep drafting with it, unseen."""
        if method != "draft" and model_name(draft) is not None and model_name(draft) == model_name(target):
            return {self.draft: "none"}
        return {self.draft: gr.skip()}

    def on_pair(self, pair):
        if pair not in PAIRS:
            return {self.method: gr.skip()}
        target, draft = PAIRS[pair]
        return {self.target: target, self.draft: draft, self.method: "draft"}

    # ---- layout -----------------------------------------------------------------------------------------
    def build(self) -> dict:
        """The tab's widgets, inside the app's gr.Tab. Returns its form's widgets by form.FIELDS name, which the
        other tabs read."""
        with gr.Row(elem_id="sv-top"):
            self.prompt = gr.Textbox(label="Prompt", lines=2, max_lines=6, value=example_prompts()[0],
                                     elem_id="sv-prompt", scale=6, min_width=240)
            self.method = gr.Dropdown(list(METHODS), value="ngram", label="Method", elem_id="sv-method",
                                      scale=1, min_width=120)
            self.run_button = gr.Button("Run", variant="primary", elem_id="sv-run", scale=1, min_width=90)
        with gr.Accordion("Settings: models, γ, sampling, length, examples", open=False, elem_id="sv-settings"):
            gr.Examples([[e["prompt"], e["method"]] for e in examples()], inputs=[self.prompt, self.method],
                        example_labels=[e["label"] for e in examples()], label="Example prompts")
            with gr.Row():
                public = serving.profile().public  # a public server offers its list, nothing typed in
                self.pair = gr.Dropdown(list(offered_pairs()), value=None, label="Preset pair (Hub)",
                                        min_width=260)
                self.target = gr.Dropdown(offered(TARGETS), value=DEFAULT_MODEL, allow_custom_value=not public,
                                          label="Target" if public else "Target (or any Hub id, folder, .gguf)",
                                          elem_id="sv-target",
                                          min_width=260)
                self.draft = gr.Dropdown(offered(DRAFTS), value="none", allow_custom_value=not public,
                                         label="Drafter (draft, adaptive)", elem_id="sv-draft", min_width=260)
            with gr.Row():
                # the ends of specviz.settings.BOUNDS, which the API and the command line check too
                self.gamma = gr.Slider(1, BOUNDS["gamma"].top(public), value=4, step=1,
                                       label="γ (draft tokens per step)",
                                       elem_id="sv-gamma", min_width=200)
                self.tree = gr.Slider(0, BOUNDS["tree"].top(public), value=0, step=1, elem_id="sv-tree", min_width=200,
                                      label="draft tree: tokens verified at once (0 = a chain of γ)",
                                      info=f"{tree_drafting()}: several candidates, depth γ")
                self.max_new = gr.Slider(8, MAX_NEW_TOKENS, value=96, step=8, label="max new tokens",
                                         elem_id="sv-max-new", min_width=200)
                # 0.5 by default: cut where the drafter doubts, the distilled draft model's chains pay on a
                # 2-core CPU, more than full chains of γ do (docs/drafters.md)
                self.draft_stop = gr.Slider(0, 0.95, value=0.5, step=0.05, elem_id="sv-draft-stop",
                                            min_width=200, label="draft stop (0 = always γ)",
                                            info="draft, early-exit: end a draft after a token the drafter "
                                                 "gives less than this probability")
            with gr.Row():
                self.temperature = gr.Slider(0, BOUNDS["temperature"].top(public), value=0, step=0.05,
                                             label="temperature (0 = greedy)", elem_id="sv-temperature", min_width=200)
                self.top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p", min_width=200)
                self.seed = gr.Number(value=0, precision=0, label="seed", minimum=0, min_width=120)
            with gr.Row():
                self.compare_plain = gr.Checkbox(value=True, label="also run plain decoding (race, speedup)")
                self.step_mode = gr.Checkbox(value=False, label="step mode (start paused)")
                self.present = gr.Checkbox(value=False, label="presentation: large type, thick marks",
                                           elem_id="sv-present")
                self.exact = gr.Checkbox(value=EngineOptions.from_environment().exact, elem_id="sv-exact",
                                         label="exact mode (GPU)", info=EXACT_INFO)
                self.replay_speed = gr.Slider(0.1, 2, value=0.5, step=0.1, label="replay: seconds per step",
                                              elem_id="sv-replay-speed", min_width=200)
        with gr.Row(elem_id="sv-controls"):
            self.stop_button = gr.Button("Stop", variant="stop", elem_id="sv-stop", size="sm", min_width=70)
            self.pause_button = gr.Button("Pause", elem_id="sv-pause", size="sm", min_width=70)
            self.next_button = gr.Button("Next step", elem_id="sv-next", size="sm", min_width=90)
            self.resume_button = gr.Button("Resume", elem_id="sv-resume", size="sm", min_width=80)
            self.replay_button = gr.Button("Replay", elem_id="sv-replay", size="sm", min_width=80)
            self.mode = gr.Radio(READING_MODES, value="answer", show_label=False, elem_id="sv-mode",
                                 container=False, min_width=290, scale=3)
        self.status = gr.HTML(render.status_html("Type a prompt and press Run.", "info"), label="status",
                              elem_id="sv-status")
        self.tokens = gr.HTML(render.token_view_html([]), label="tokens", elem_id="sv-tokens")
        gr.HTML(render.legend_html(), elem_id="sv-legend")
        with gr.Row(elem_id="sv-charts"):
            with gr.Column(min_width=320):
                self.summary = gr.HTML(label="summary", elem_id="sv-summary")
            with gr.Column(min_width=320):
                self.race_plot = gr.Plot(label="Race", elem_id="sv-race-plot")
        with gr.Row():
            with gr.Column(scale=2, min_width=320):
                self.step_plot = gr.Plot(label="Steps", elem_id="sv-step-plot")
            with gr.Column(scale=1, min_width=320):
                self.theory_plot = gr.Plot(label="Theory", elem_id="sv-theory-plot")
        gr.Markdown("### Step inspector\nFor each drafted position the verifier reached: the target's p "
                    "against the drafter's q over their most probable tokens, then the distribution the "
                    "step's last token was drawn from (the residual after a rejection).")
        self.step_slider = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False,
                                     elem_id="sv-step-slider")
        self.inspector = gr.Plot(label="Inspector", elem_id="sv-inspector")
        self.trace = gr.File(label="trace JSON (every step, token, p, q, u and timing)", elem_id="sv-trace")
        gr.Markdown("Charts: the camera icon in each chart's toolbar saves it as a PNG image.")
        self.page_width = gr.Number(visible=False)
        self.fields = {"prompt": self.prompt, "method": self.method, "target": self.target, "draft": self.draft,
                       "gamma": self.gamma, "temperature": self.temperature, "top_p": self.top_p,
                       "max_new_tokens": self.max_new, "seed": self.seed, "compare_plain": self.compare_plain,
                       "step_mode": self.step_mode, "tree": self.tree, "draft_stop": self.draft_stop,
                       "exact": self.exact}
        return self.fields

    def wire(self, engine: dict, free: dict, also_stop: list):
        """The tab's events, once every tab is built: its Stop also cancels `also_stop` (the other tabs' runs).
        engine: the queue settings of an event that runs the engine; free: of one that does not."""
        view_outputs = [self.status, self.tokens, self.summary, self.step_plot, self.race_plot, self.theory_plot,
                        self.inspector, self.step_slider, self.trace]
        # engine events read their inputs raw (preprocess=False): form.read_form is their one validation
        engine = dict(engine, preprocess=False)
        run_inputs = [self.fields[name] for name in RUN_FIELDS]
        # the page clears the previous run first, and asks for the new one once the cleared page has been
        # drawn (AFTER_PAINT): the clearing (its charts taken down) does not land on the new run's first steps
        clear = dict(fn=self.on_clear, outputs=view_outputs, api_visibility="private", show_progress="hidden",
                     **free)
        run_event = self.run_button.click(**clear).then(self.on_run, run_inputs, view_outputs, api_name="run",
                                                        show_progress="hidden", js=AFTER_PAINT, **engine)
        submit_event = self.prompt.submit(**clear).then(self.on_run, run_inputs, view_outputs, js=AFTER_PAINT,
                                                        api_visibility="private", show_progress="hidden", **engine)
        resume_event = self.resume_button.click(self.on_resume, None, view_outputs, api_name="resume",
                                                show_progress="hidden", **engine)
        # "multiple": a second click while a step is pending counts (gradio's default drops it)
        next_event = self.next_button.click(self.on_next, None, view_outputs, api_name="next_step",
                                            show_progress="hidden", trigger_mode="multiple", **engine)
        replay_event = self.replay_button.click(self.on_replay, [self.replay_speed], view_outputs, api_name="replay",
                                                show_progress="hidden", preprocess=False, concurrency_id=REPLAY,
                                                concurrency_limit=REPLAYS)
        self.stop_button.click(self.on_stop, None, view_outputs, api_name="stop", show_progress="hidden",
                               cancels=[run_event, submit_event, resume_event, next_event, replay_event, *also_stop],
                               **free)
        self.mode.change(None, [self.mode], None, js="(mode) => { document.body.dataset.svMode = mode; }")
        self.present.change(None, [self.present], None,
                            js="(on) => { document.body.classList.toggle('sv-present', on); }")
        self.pause_button.click(self.on_pause, None, view_outputs, api_name="pause", show_progress="hidden", **free)
        self.step_slider.input(self.on_inspect, [self.step_slider],  # always_last: in order while dragging
                               [self.tokens, self.inspector, self.step_plot, self.race_plot],
                               api_name="inspect", show_progress="hidden", trigger_mode="always_last",
                               preprocess=False, **free)
        self.method.input(self.on_method, [self.method, self.target, self.draft], [self.draft],
                          api_visibility="private", **free)
        self.pair.change(self.on_pair, [self.pair], [self.target, self.draft, self.method], api_visibility="private",
                         **free)


def _raise(message: str):
    raise gr.Error(message, print_exception=False)

