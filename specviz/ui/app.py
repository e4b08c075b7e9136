"""The Gradio app: the page's shell (its tabs, the page-wide script, the APIs, the queue) around the tabs, each
built by its own module: run_tab.py, tabs.py (Compare, Cost curve), batch_tab.py, learn.py, endpoint.py (API)."""
from __future__ import annotations

import os

import gradio as gr
from starlette.middleware import Middleware

from ..service import serving
from . import render
from .admission import admit_fairly
from .assets import css, example_prompts
from .batch_tab import BatchTab
from .endpoint import api_help, page_url, speculate
from .frames import EarlyScript
from .learn import LearnTab
from .learn_endpoints import bugs_api, distribution_api, lesson_api
from .learn_saved import SAVED_MAX_BYTES
from .sessions import end_session, session_key
from .mcp import check_installed, only_these_tools
from .readouts import TRACE_MAX_AGE
from .run_tab import RANGE_SCRIPT, RUN_STATE_SCRIPT, RUN_TAB, RunTab
from .tabs import CompareTab, CostTab

CONCURRENCY = int(os.environ.get("SPECVIZ_CONCURRENCY", "4"))  # runs at once; their engine steps interleave
QUEUE_SIZE = 64  # requests waiting at once, all users together (a public server also limits each one's share)

TAB_TITLES = {RUN_TAB: "Run", "compare": "Compare methods", "cost": "Cost curve", "batch": "Batch", "learn": "Learn",
              "api": "API"}  # the app's tabs by id, in order
PAGE_JS = ("() => { document.body.dataset.svMode = 'answer'; " + RUN_STATE_SCRIPT + RANGE_SCRIPT + render.TIP_SCRIPT
           + " }")  # and the tips' placing


class SpecvizApp:
    """Builds the Blocks: the shell, and each tab by its own class (the Run tab's is `run`)."""

    def __init__(self):
        self.demo: gr.Blocks | None = None
        self.run = RunTab()

    def build(self) -> gr.Blocks:
        with gr.Blocks(title="specviz: speculative decoding, step by step",
                       delete_cache=(TRACE_MAX_AGE, TRACE_MAX_AGE)) as demo:
            gr.HTML('<div class="sv-intro"><h1>specviz</h1><span>A drafter guesses the next few tokens; the target '
                    'model checks them all in one pass, keeps what it agrees with and writes the next one itself. '
                    'Measured live, on this machine.</span></div>')
            # a phone's tab bar shows two tabs and hides the rest behind "...": this row, shown there only
            # (assets/specviz.css), lists them all
            tab_pick = gr.Radio([(title, key) for key, title in TAB_TITLES.items()], value=RUN_TAB, show_label=False,
                                container=False, elem_id="sv-tab-pick")
            # tabs by id: a button elsewhere selects one (gr.Tabs(selected=...)) whatever its label says
            with gr.Tabs(elem_id="sv-tabs") as self.tabs:
                with gr.Tab(TAB_TITLES[RUN_TAB], id=RUN_TAB):
                    fields = self.run.build()
                engine = dict(concurrency_id="engine", concurrency_limit=CONCURRENCY)
                free = dict(concurrency_limit=None)
                with gr.Tab(TAB_TITLES["compare"], id="compare"):
                    compare_event = CompareTab().build(fields, engine)
                with gr.Tab(TAB_TITLES["cost"], id="cost"):
                    cost_event = CostTab().build(fields["target"], engine)
                with gr.Tab(TAB_TITLES["batch"], id="batch"):
                    batch_event = BatchTab().build(fields["target"], example_prompts(), engine)
                with gr.Tab(TAB_TITLES["learn"], id="learn"):
                    lesson_fields = [fields[name] for name in ("prompt", "method", "gamma", "temperature",
                                                               "max_new_tokens", "seed")]
                    learn_events = LearnTab().build(fields["target"], lesson_fields, engine, example_prompts(),
                                                    self.tabs)
                with gr.Tab(TAB_TITLES["api"], id="api"):
                    api_text = gr.Markdown(api_help("http://127.0.0.1:7860/"), elem_id="sv-api-help")
            self.run.wire(engine, free, [compare_event, cost_event, batch_event, *learn_events])
            gr.api(speculate, api_name="speculate", concurrency_id="engine", concurrency_limit=CONCURRENCY)
            gr.api(distribution_api, api_name="distribution", concurrency_id="engine", concurrency_limit=CONCURRENCY)
            gr.api(bugs_api, api_name="bugs", concurrency_id="engine", concurrency_limit=CONCURRENCY)
            gr.api(lesson_api, api_name="lesson", concurrency_id="engine", concurrency_limit=CONCURRENCY)
            demo.load(_api_text, None, [api_text], api_visibility="private", **free)
            demo.load(self.run.on_width, [self.run.page_width], None, js="() => window.innerWidth",
                      api_visibility="private", show_progress="hidden", **free)
            tab_pick.change(lambda key: gr.Tabs(selected=key), [tab_pick], [self.tabs], api_visibility="private",
                            show_progress="hidden", **free)
            self.tabs.select(picked_tab, None, [tab_pick], api_visibility="private",
                             show_progress="hidden", **free)
            demo.unload(_end_session)
        self.demo = demo
        return demo


def picked_tab(event: gr.SelectData) -> str:
    """The phone's tab row follows a tab chosen in the bar."""
    return list(TAB_TITLES)[event.index]


def _api_text(request: gr.Request) -> str:
    return api_help(page_url(request))


def _end_session(request: gr.Request):
    end_session(session_key(request))


def build_demo() -> gr.Blocks:
    return SpecvizApp().build()


def launch(demo: gr.Blocks | None = None, mcp: bool = False, **kwargs):
    """Queue with explicit concurrency and serve; kwargs go to Blocks.launch (server_port, prevent_thread_lock...).
    The profile (serving.configure_profile) is the one the demo was built with: on a public server, requests over a
    session's or a client's share are refused at the queue's door, and uploads are bounded. mcp: also serve
    /speculate and /distribution as MCP tools (ui/mcp.py decides when; off, gradio's environment cannot turn it on)."""
    demo = demo or build_demo()
    if mcp:
        check_installed()
        only_these_tools(demo)
    kwargs["mcp_server"] = mcp
    # a public server closes gradio's direct route (/gradio_api/run/<name>): it skips the queue, its admission
    # and its cancels (gradio closes it by itself on a Space only, and the profile is offered for self-hosting)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE,
               api_open=False if serving.profile().public else None)
    admit_fairly(demo, serving.profile())
    app_kwargs = dict(kwargs.pop("app_kwargs", None) or {})
    app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), Middleware(EarlyScript)]
    if serving.profile().public:
        kwargs.setdefault("max_file_size", SAVED_MAX_BYTES)
        kwargs.setdefault("show_error", True)
    return demo.launch(css=css(), js=PAGE_JS, app_kwargs=app_kwargs, **kwargs)
