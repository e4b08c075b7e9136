"""The suite's shared fixtures, and how it spreads over the cores.

pytest.ini runs the suite on every core (pytest-xdist, `-n auto`). What is expensive to start is started at most
once per worker and shared by the modules that worker runs: the default model, the app served in the default
profile, one chromium (a fresh context per test). A test module runs on one worker (its module fixtures are made
once, its tests keep their order), except the sampling statistics, whose tests spread one by one
(pytest_xdist_make_scheduler). Markers say what a test needs (model, server, browser, subprocess, stats, train);
most come from the fixtures it uses, so `-m "not browser"` and the like select by them."""
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import command_line
from specviz.models.testing import perturbed_copy, tiny_causal_lm

ROOT = Path(__file__).resolve().parents[1]


def _threads_per_worker() -> int:
    """The cores over the workers: two workers of two threads each on two cores spin against each other (torch's
    OpenMP threads busy-wait), several times slower than one thread each."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, cores // max(1, workers)))


torch.set_num_threads(_threads_per_worker())
# the interpreters a test starts (the command line, scripts, the app a script launches) share the worker's cores:
# they take its threads too, unless the environment chose a number (torch reads this as it starts)
os.environ.setdefault("OMP_NUM_THREADS", str(_threads_per_worker()))

# fixture -> the marker a test that uses it gets
FIXTURE_MARKS = {
    "default_target": "model", "default_draft_folder": "model",
    "app_url": "server",
    "chromium": "browser",
    "fresh_python": "subprocess", "cli_subprocess": "subprocess",
}
# modules whose tests spread one by one over the workers: each samples thousands of runs on its own, and their
# module fixtures (tiny random models) cost nothing to make again
SPREAD = {"tests/test_sampling_exactness.py", "tests/test_device_sampling.py"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, mark in FIXTURE_MARKS.items():
            if fixture in item.fixturenames:
                item.add_marker(mark)


def pytest_xdist_make_scheduler(config, log):
    """A module's tests on one worker (its module fixtures made once, its tests in their order), the largest
    modules first; the statistics' tests one by one (SPREAD)."""
    from xdist.scheduler import LoadScopeScheduling

    class Modules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if module in SPREAD else module

    return Modules(config, log)


# models ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def default_target():
    """The real offline default model (SmolLM2-135M-Instruct), float32 on the CPU, loaded once."""
    from specviz import load_model

    return load_model("default", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_target():
    return tiny_causal_lm(vocab_size=32, seed=0)


@pytest.fixture(scope="session")
def tiny_drafter(tiny_target):
    return perturbed_copy(tiny_target, noise=0.5, seed=1)


@pytest.fixture(scope="session")
def default_draft_folder(default_target, tmp_path_factory):
    """A separate draft model in save_pretrained layout: the default model's first 4 layers, saved to a folder
    (it shares the vocabulary, disagrees often enough to exercise rejections)."""
    from transformers import AutoModelForCausalLM

    config = default_target.model.config.__class__.from_dict(default_target.model.config.to_dict())
    config.num_hidden_layers = 4
    config.quantization_config = None
    small = AutoModelForCausalLM.from_config(config)
    missing, unexpected = small.load_state_dict(default_target.model.state_dict(), strict=False)
    assert not missing
    folder = tmp_path_factory.mktemp("draft4")
    small.save_pretrained(folder)
    default_target.tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def foreign_models(tmp_path_factory):
    """Models specviz must refuse, as save_pretrained folders: a causal LM with another vocabulary (8 words),
    and a model that is not a causal LM."""
    from transformers import DistilBertConfig, DistilBertModel

    from specviz.models.testing import save_tiny_model, word_tokenizer

    tokenizer = word_tokenizer(8)
    other = save_tiny_model(tmp_path_factory.mktemp("other-vocab"), vocab_size=8, tokenizer=tokenizer)
    encoder = tmp_path_factory.mktemp("encoder")
    DistilBertModel(DistilBertConfig(vocab_size=8, dim=32, hidden_dim=64, n_layers=1,
                                     n_heads=2)).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    return {"other_vocab": other, "encoder": str(encoder)}


# the served app and the browser ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def app_url(default_target):
    """The app served once for the tests of the default profile (its model the session's, through the registry)."""
    from ui_server import serve_app

    with serve_app() as url:
        yield url


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium, launched once; a test opens its own context (browser.new_context) and closes it."""
    from ui_server import CHROMIUM, CHROMIUM_ARGS, bounded, require_chromium

    require_chromium()
    sync_api = pytest.importorskip("playwright.sync_api")
    playwright = sync_api.sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    # a close takes a second or two; one that hangs on the driver's pipe (a full run's last worker met it, 60 s at
    # the end of the suite) is cut short: the tests have run
    with bounded(15):
        for close in (browser.close, playwright.stop):
            with contextlib.suppress(Exception):  # a driver killed by the watchdog fails the close: the tests ran
                close()


# the command line -----------------------------------------------------------------------------------------

@pytest.fixture
def cli_subprocess():
    """`python -m specviz ARGS` in a fresh interpreter (command_line.run_cli runs it in this process)."""
    return command_line.run_cli_subprocess


@pytest.fixture
def fresh_python():
    """Python code in a fresh interpreter (what must run before torch is imported, or in a process of its own):
    fresh_python(code, *args, env=None, cwd=None) -> CompletedProcess."""
    def run(code: str, *args, env: dict | None = None, cwd=None, timeout: float = 600):
        return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, cwd=cwd, env=env)
    return run
