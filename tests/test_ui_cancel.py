"""Cancellation against the served app: a cancelled gradio_client job, and a client process killed mid-run, stop
the engine's run (its GPU call is closed before its end, gpu.calls()["stopped"]) and a short request after it
is answered. The default model; the long run asks 512 tokens so that it cannot end by itself in the test's time."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from gradio_client import Client

from specviz.service import gpu
from ui_server import wait_done

LONG = dict(prompt="Write a long story about a lighthouse keeper and her cat.", method="ngram", max_new_tokens=512,
            gamma=4, temperature=0.0, seed=0, api_name="/speculate")
SHORT = dict(prompt="Say hello.", method="ngram", max_new_tokens=8, gamma=4, temperature=0.0, seed=0,
             api_name="/speculate")


def wait_for(condition, timeout: float, what: str) -> None:
    """A guard against a hang, not a speed assertion."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s ({gpu.calls()})")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def served(app_url):
    client = Client(app_url, verbose=False)
    client.predict(**SHORT)  # the models loaded and warm: what follows measures runs, not the first load
    return app_url, client


def long_run_started(before: dict) -> None:
    """Wait until the long run's GPU call runs and has had a moment to take steps."""
    wait_for(lambda: gpu.calls()["running"] >= 1, 120, "the long run did not start")
    time.sleep(2.0)
    assert gpu.calls()["stopped"] == before["stopped"], "nothing was cancelled yet"


def test_cancelled_job_stops_its_run_and_frees_the_engine(served):
    url, client = served
    before = gpu.calls()
    job = client.submit(**LONG)
    long_run_started(before)
    job.cancel()
    wait_for(lambda: gpu.calls()["stopped"] > before["stopped"], 60, "the cancelled run kept running")
    assert gpu.calls()["running"] == 0
    report = client.predict(**SHORT)
    assert report["text"] and report["metrics"]["new_tokens"] <= 8
    after = gpu.calls()
    assert after["stopped"] == before["stopped"] + 1 and after["finished"] == before["finished"] + 1


CHILD = textwrap.dedent("""
    import sys, time
    from gradio_client import Client
    client = Client(sys.argv[1], verbose=False)
    client.submit(prompt="Write a long story about a lighthouse keeper and her cat.", method="ngram",
                  max_new_tokens=512, gamma=4, temperature=0.0, seed=0, api_name="/speculate")
    print("submitted", flush=True)
    time.sleep(600)
""")


@pytest.mark.subprocess
def test_killed_client_stops_its_run(served):
    url, client = served
    before = gpu.calls()
    child = subprocess.Popen([sys.executable, "-c", CHILD, url], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "submitted"
        long_run_started(before)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    wait_for(lambda: gpu.calls()["stopped"] > before["stopped"], 60, "the killed client's run kept running")
    report = client.predict(**SHORT)
    assert report["text"]
    assert gpu.calls()["stopped"] == before["stopped"] + 1


def test_uncancelled_run_finishes(served):
    """The control: a run nobody cancels is counted finished, not stopped."""
    url, client = served
    before = gpu.calls()
    job = client.submit(**SHORT)
    assert wait_done(job)[0]["text"]
    after = gpu.calls()
    assert (after["finished"], after["stopped"]) == (before["finished"] + 1, before["stopped"])


RUN_TAB = dict(prompt=LONG["prompt"], method="ngram", target="default", draft="none", gamma=4, temperature=0, top_p=1,
               max_new_tokens=512, seed=0, compare_plain=True, step_mode=False, api_name="/run")


def test_cancelled_run_tab_job_stops_its_worker(served):
    """The Run tab's streaming handler: a cancel closes it, and the run its worker thread advances stops."""
    from specviz.ui import sessions

    url, client = served
    job = client.submit(**RUN_TAB)
    wait_for(lambda: any(run.active for run in sessions.live_runs()), 120, "the run did not start")
    time.sleep(2.0)
    job.cancel()
    wait_for(lambda: not any(run.active for run in sessions.live_runs()), 60, "the cancelled run kept running")
    assert all(run.speculative.emitted < 512 for run in sessions.live_runs())
    assert client.predict(**SHORT)["text"]


def test_cancelled_cost_curve_stops_its_call(served):
    """A streaming handler that pulls a GPU call (the Cost curve tab's, as the Learn tab's lessons and Batch)."""
    url, client = served
    before = gpu.calls()
    job = client.submit("default", api_name="/cost_curve")
    wait_for(lambda: gpu.calls()["running"] >= 1, 120, "the cost curve did not start")
    time.sleep(2.0)
    job.cancel()
    wait_for(lambda: gpu.calls()["stopped"] > before["stopped"], 60, "the cancelled cost curve kept running")
    assert client.predict(**SHORT)["text"]
