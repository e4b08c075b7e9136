"""ZeroGPU under its fork: with SPECVIZ_FORK_GPU=1 every GPU call runs the way `spaces.GPU` runs it on ZeroGPU
(specviz/service/zero_emulation.py: in a worker process forked from this one and kept for the next calls while idle, its
arguments and records pickled, a stop event), against the served app. Run, Stop, Replay (with the inspector),
Compare and a Learn lesson must work, everything after a run served in this process from the records the call
sent; a worker prepares a run's shapes once and keeps them, a new worker prepares again, and a preparation past
its bound lets the run go on eagerly and says so."""
from __future__ import annotations

import multiprocessing
import os
import re
import time

import pytest
from gradio_client import Client

from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once
from specviz.service import events
from specviz.service import gpu, live, recorded_runs, run_request, run_setup
from specviz.ui import sessions
from ui_server import serve_app, wait_done

pytestmark = pytest.mark.server  # its own server: GPU calls forked as on ZeroGPU
PROMPT = "List the days of the week, one per line."
STATUS, TOKENS = 0, 1


def run_args(**overrides):
    args = dict(prompt=PROMPT, method="ngram", target="default", draft="none", gamma=4, temperature=0, top_p=1,
                max_new_tokens=16, seed=0, compare_plain=True, step_mode=False)
    return {**args, **overrides}


def kinds_in(html_text) -> list[str]:
    return re.findall(r'class="tok tok-(\w+)', html_text if isinstance(html_text, str) else "")


def steps_in(html_text) -> list[int]:
    return [int(s) for s in re.findall(r'data-step="(\d+)"', html_text if isinstance(html_text, str) else "")]


@pytest.fixture(scope="module")
def url():
    os.environ["SPECVIZ_FORK_GPU"] = "1"
    try:
        with serve_app() as address:
            yield address
    finally:
        del os.environ["SPECVIZ_FORK_GPU"]


def test_a_run_computed_in_a_forked_call_replays_and_inspects_here(url, default_target):
    client = Client(url, verbose=False)
    before = gpu.calls()
    final = wait_done(client.submit(**run_args(), api_name="/run"))[-1]
    reference = run_once(default_target, make_proposer("ngram", default_target), encode(default_target, PROMPT),
                         DecodeSettings(max_new_tokens=16, gamma=4))
    assert "Done" in final[STATUS]
    assert kinds_in(final[TOKENS]) == [t.kind.value for t in reference.tokens]  # exact, as a run in this process
    assert gpu.calls()["finished"] == before["finished"] + 1
    # the session keeps records only
    assert any(isinstance(run, recorded_runs.RecordedRun) for run in sessions.live_runs())
    assert gpu.calls()["running"] == 0
    gpu.retire_workers()  # the worker is gone (ZeroGPU lent its GPU elsewhere): what follows reads the records
    assert not multiprocessing.active_children()
    replay = wait_done(client.submit(0.05, api_name="/replay"))
    last = len(reference.steps) - 1
    assert max(steps_in(replay[-1][TOKENS])) == last and max(steps_in(replay[1][TOKENS])) < last
    inspected = client.predict(1, api_name="/inspect")
    assert 'sv-current" data-step="1"' in inspected[0]


def test_stop_ends_the_forked_call(url):
    client = Client(url, verbose=False)
    before = gpu.calls()
    job = client.submit(**run_args(max_new_tokens=512, prompt="Write a long story about a lighthouse."),
                        api_name="/run")
    deadline = time.monotonic() + 300
    while not any(kinds_in(o[TOKENS]) for o in job.outputs()):
        assert time.monotonic() < deadline, "no tokens arrived"
        time.sleep(0.05)
    stopped = client.predict(api_name="/stop")
    wait_done(job, timeout=60)
    assert "Stopped" in stopped[STATUS] and len(steps_in(stopped[TOKENS])) < 400
    deadline = time.monotonic() + 60  # a guard against a hang: the call ends at its next record
    while gpu.calls()["stopped"] == before["stopped"] or gpu.calls()["running"]:
        assert time.monotonic() < deadline, f"the forked call kept running: {gpu.calls()}"
        time.sleep(0.05)
    again = wait_done(client.submit(**run_args(max_new_tokens=8), api_name="/run"))[-1]
    assert "Done" in again[STATUS]


def test_compare_in_a_forked_call(url):
    client = Client(url, verbose=False)
    status, table, _ = client.predict(PROMPT, ["ngram"], "default", "none", 4, 0, 1, 12, 0, api_name="/compare")
    assert "Done" in status
    assert {row[0] for row in table["data"]} == {"plain", "ngram"}


def test_a_lesson_in_a_forked_call(url):
    client = Client(url, verbose=False)
    before = gpu.calls()
    record = client.predict(prompt="The capital of France is", method="ngram", runs=20, temperature=1.0, seed=0,
                            wrong=False, target="default", api_name="/distribution")
    assert record and gpu.calls()["finished"] == before["finished"] + 1 and gpu.calls()["running"] == 0


REUSE_PROMPT = "Name three colours."


def finished_run(client, prompt: str = REUSE_PROMPT):
    """A run of `prompt` through the served app: its final status and the session's RecordedRun."""
    final = wait_done(client.submit(**run_args(prompt=prompt, max_new_tokens=8), api_name="/run"))[-1]
    runs = [run for run in sessions.live_runs() if run.request.prompt == prompt]
    assert len(runs) == 1 and isinstance(runs[0], recorded_runs.RecordedRun)  # one client: one session, its latest run
    return final, runs[0]


def test_a_worker_keeps_what_it_prepared_and_a_new_worker_prepares_again(url):
    client = Client(url, verbose=False)
    gpu.retire_workers()
    final, first = finished_run(client)
    _, second = finished_run(client)
    assert "Done" in final[STATUS] and first.preparation is not None
    assert first.preparation.fresh_worker and first.preparation.needed  # a fresh worker prepares
    assert first.preparing_since is not None and first.fresh_worker  # what the page shows while it does
    assert first.preparation.pid == gpu.worker_pid() != os.getpid()
    reused = second.preparation
    assert (reused.pid, reused.call, reused.needed) == (first.preparation.pid, 2, False)  # reused: nothing to prepare
    assert second.preparing_since is None and reused.eager is None
    gpu.retire_workers()  # the control: a new worker has prepared nothing
    _, third = finished_run(client)
    assert third.preparation.pid != first.preparation.pid
    assert third.preparation.needed and third.preparation.call == 1 and third.preparing_since is not None


BOUND_PROMPT = "Name three rivers."  # its own: earlier tests' sessions keep their runs of PROMPT


def test_a_preparation_past_its_bound_runs_eagerly_and_says_so(url, default_target, monkeypatch):
    client = Client(url, verbose=False)
    monkeypatch.setattr(run_setup, "CAPTURE_SECONDS", 0)  # what the next worker is forked with
    gpu.retire_workers()
    try:
        final, run = finished_run(client, BOUND_PROMPT)
    finally:
        monkeypatch.undo()
        gpu.retire_workers()  # later tests get a worker with the app's bound
    assert "Done" in final[STATUS] and "without CUDA graphs" in final[STATUS] and "within 0 s" in final[STATUS]
    assert run.preparation.eager and run.preparation.needed
    reference = run_once(default_target, make_proposer("ngram", default_target), encode(default_target, BOUND_PROMPT),
                         DecodeSettings(max_new_tokens=8, gamma=4))
    assert kinds_in(final[TOKENS]) == [t.kind.value for t in reference.tokens]  # the run went on, exact
    _, normal = finished_run(client, BOUND_PROMPT)
    assert normal.preparation.eager is None  # the control: within the app's bound, no such note


def test_the_status_while_a_worker_prepares():
    from specviz.ui.readouts import preparing_message

    fresh = preparing_message(True, 3.2, gpu.CAPTURE_SECONDS)
    again = preparing_message(False, 1.0, gpu.CAPTURE_SECONDS)
    assert fresh.startswith("Preparing the GPU (first run on this worker)… 3 s") and "at most 30 s" in fresh
    assert "first run of these settings on this worker" in again and "first run on this worker" not in again
    assert gpu.CAPTURE_SECONDS < gpu.DURATION  # a call that captures to its bound still has time to run


def models_in_use_here():
    yield sorted(sessions.models_in_use())


def test_a_worker_does_not_take_the_apps_sessions_for_its_own():
    """A worker kept for many calls must be free to unload a model the app's sessions used when it was forked."""
    import threading

    from specviz.service.zero_emulation import GpuFunction

    key, released = "fork-test-session", threading.Event()

    def records():  # a call still computing: its run in the session is unfinished
        released.wait(60)
        yield events.Ended(live.STOPPED, None)

    sessions.session(key).run = recorded_runs.RecordedRun(run_request.RunRequest(PROMPT, "ngram"), records())
    call = GpuFunction(models_in_use_here)
    try:
        assert "default" in sessions.models_in_use()  # the control: this process's sessions hold it
        assert list(call()) == [[]]  # the worker's copy of the sessions holds nothing of its own
    finally:
        released.set()
        call.retire()
        sessions.end_session(key)
