"""A hostile visitor against the app served in its public profile (behind a trusted proxy, as on a Space), each
try one that took the server from a class before it was closed: forged X-Forwarded-For first entries, free calls
that made sessions and pushed a student's running session out, replays that held worker threads, one long
/speculate that held the engine from start to end, prompts long in tokens, an address that used its share,
gradio's direct route, an endpoint number that does not exist, a call with too few values. One server for all."""
from __future__ import annotations

import collections
import concurrent.futures
import json
import sys
import threading
import time
import uuid

import httpx
import pytest
from gradio_client import Client

from specviz.api import DecodeSettings
from specviz.service.public import profile_from_env
from specviz.service import engine_lock, live, run_request, run_setup, serving
from specviz.ui import admission, sessions
from ui_server import wait_done

pytestmark = pytest.mark.server  # its own server, in a profile of its own
PER_CLIENT = 4
SHORT = dict(prompt="Say hello.", method="ngram", max_new_tokens=8, gamma=4, temperature=0.0, seed=0,
             api_name="/speculate")
LONG = dict(SHORT, prompt="Write a long story about a lighthouse keeper and her cat.", max_new_tokens=256)


SERVED: dict = {}  # the served demo: its queue is read to know when a run is under way


@pytest.fixture(scope="module")
def url():
    from specviz.ui.app import build_demo, launch

    with serving.served_as(profile_from_env({"SPECVIZ_PUBLIC": "1", "SPACE_ID": "owner/specviz",
                                             "SPECVIZ_PER_CLIENT": str(PER_CLIENT), "SPECVIZ_MEMORY_BUDGET": "6GiB"})):
        demo = SERVED["demo"] = build_demo()
        try:
            _, served, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
            served = served.rstrip("/")
            Client(served, verbose=False).predict(**SHORT)  # the model loaded and warm
            yield served
        finally:
            demo.close()


def _queue():
    return SERVED["demo"]._queue


def from_address(url: str, forwarded_for: str) -> Client:
    return Client(url, verbose=False, headers={"X-Forwarded-For": forwarded_for})


def outcome(job) -> str:
    try:
        return "answered" if job.result(timeout=600)["text"] else "empty"
    except Exception as error:  # a refusal: HTTP 429 at the join, its detail the sentence a browser shows
        response = getattr(error, "response", None)
        if response is not None and response.status_code == 429:
            return "refused: " + response.json().get("detail", "")
        return f"error: {error}"


def test_forged_first_forwarded_entries_are_one_address(url):
    """Twelve sessions, each with a new forged first entry before the address the proxy appended: they share one
    address's places. (Counted by the first entry, all twelve were admitted: each looked like a new address.)"""
    clients = [from_address(url, f"192.0.2.{i}, 10.1.0.1") for i in range(12)]
    jobs = [client.submit(**dict(SHORT, max_new_tokens=16)) for client in clients]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(outcome, jobs))
    refused = [o for o in outcomes if o.startswith("refused")]
    assert all(o == "answered" or "Too many runs from your network" in o for o in outcomes), outcomes
    # no more than its share got in while the joins arrived (each answered run frees a place)
    assert len(refused) >= len(jobs) - 2 * PER_CLIENT, outcomes


def test_an_address_over_its_engine_budget_is_refused_while_another_waits(url):
    admission.LEDGER.charge("10.1.0.2", 10_000)  # as if it had run for hours in the window
    other = from_address(url, "10.1.0.3").submit(**dict(LONG, max_new_tokens=64))
    deadline = time.monotonic() + 120
    while not any(admission.address_of(e.request, serving.profile()) == "10.1.0.3"
                  for e in admission.engine_events(_queue())):
        assert time.monotonic() < deadline, "the other address's run never reached the queue"
        time.sleep(0.05)
    refused = outcome(from_address(url, "10.1.0.2").submit(**SHORT))
    assert "used its share of this server" in refused and "while others are waiting" in refused, refused
    assert outcome(from_address(url, "10.1.0.4").submit(**SHORT)) == "answered"  # control: an address within it
    assert outcome(other) == "answered"
    assert outcome(from_address(url, "10.1.0.2").submit(**SHORT)) == "answered"  # alone again: served


def raw_call(http: httpx.Client, endpoint: str, data: list, session: str | None = None) -> tuple[int, str]:
    """(HTTP status of the join, the call's last event and data) of one REST call."""
    body = {"data": data, **({"session_hash": session} if session else {})}
    started = http.post(f"/gradio_api/call/{endpoint}", content=json.dumps(body),
                        headers={"content-type": "application/json", "X-Forwarded-For": "10.1.0.9"})
    if started.status_code != 200:
        return started.status_code, started.text
    last = ""
    with http.stream("GET", f"/gradio_api/call/{endpoint}/{started.json()['event_id']}") as stream:
        for line in stream.iter_lines():
            last = line if line.startswith(("event:", "data:")) and line != "data: null" else last
    return 200, last


def test_free_calls_make_no_session_and_a_running_session_is_never_evicted(url, monkeypatch):
    """A student's Run-tab run while 40 free calls (Pause, Stop, Replay, the step slider) arrive from fresh
    sessions, the session table capped at 8: the run finishes and can be inspected."""
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 8)
    student = from_address(url, "10.1.0.5")
    run_values = dict(prompt=LONG["prompt"], method="ngram", target="default", draft="none", gamma=4, temperature=0,
                      top_p=1, max_new_tokens=48, seed=0, compare_plain=True, step_mode=False, tree=0, draft_stop=0)
    job = student.submit(**run_values, api_name="/run")
    deadline = time.monotonic() + 300
    while (state := sessions.find_session(student.session_hash)) is None or state.run is None:
        assert time.monotonic() < deadline and not job.done(), "the student's run did not start"
        time.sleep(0.05)
    sessions_before = len(sessions.kept_sessions())
    with httpx.Client(base_url=url, timeout=120) as http:
        for i in range(10):
            for endpoint, data in (("pause", []), ("stop", []), ("replay", [0.1]), ("inspect", [3])):
                raw_call(http, endpoint, data)
    assert len(sessions.kept_sessions()) <= sessions_before  # none of the forty made one
    wait_done(job, 600)
    state = sessions.find_session(student.session_hash)
    assert state is not None and state.run.phase == live.DONE, state and state.run.phase
    inspected = student.predict(step=1, api_name="/inspect")
    assert inspected[0] and "sv-tok" in str(inspected[0])  # the token view of step 1 of the student's run


def finished_run():
    request = run_request.RunRequest("Say hello.", "ngram", settings=DecodeSettings(max_new_tokens=16, gamma=4))
    run = live.LiveRun(request, *run_setup.load_models(request))
    run.start()
    run.join(300)
    assert run.phase == live.DONE
    return run


def threads_in(function: str) -> int:
    """Threads whose stack is inside `function` now (a sync generator's wait holds its worker thread there)."""
    count = 0
    for frame in sys._current_frames().values():
        while frame is not None and frame.f_code.co_name != function:
            frame = frame.f_back
        count += frame is not None
    return count


def test_replays_are_one_a_page_and_hold_no_worker_thread(url):
    """Six pages replay a run slowly (2 s a step) at once; a second Replay of one page is refused at the door.
    No thread waits inside a replay between its frames (each replay was a worker thread asleep for every step)."""
    run = finished_run()
    clients = [from_address(url, f"10.1.1.{i}") for i in range(6)]
    for client in clients:
        sessions.session(client.session_hash).run = run
    jobs = [client.submit(seconds_per_step=2.0, api_name="/replay") for client in clients]
    deadline = time.monotonic() + 120
    while sum(len(job.outputs()) > 0 for job in jobs) < len(jobs):
        assert time.monotonic() < deadline, "the replays did not start"
        time.sleep(0.1)
    holding = []
    for _ in range(20):  # over two seconds: every replay sleeps through most of it
        holding.append(threads_in("handle_replay"))
        time.sleep(0.1)
    assert all(not job.done() for job in jobs), "a replay ended: the samples show nothing"
    second = clients[0].submit(seconds_per_step=2.0, api_name="/replay")
    assert "A replay is already going in this page" in outcome_text(second)
    for client in clients:
        client.predict(api_name="/stop")
    assert max(holding) == 0, holding
    # control: the sampler finds a thread inside a function that waits in one
    stop = threading.Event()
    waiting = threading.Thread(target=handle_replay_stand_in, args=(stop,), daemon=True)
    waiting.start()
    time.sleep(0.2)
    assert threads_in("handle_replay_stand_in") == 1
    stop.set()


def handle_replay_stand_in(stop: threading.Event) -> None:
    stop.wait(10)


def outcome_text(job) -> str:
    try:
        return str(job.result(timeout=120))
    except Exception as error:
        response = getattr(error, "response", None)
        return response.json().get("detail", "") if response is not None else str(error)


def test_a_long_speculate_shares_the_engine_with_a_short_one(url):
    """A 256-token /speculate and then an 8-token one from another address: the short one is answered while the
    long one still runs (the long one held the engine from its start to its end before)."""
    long_job = from_address(url, "10.1.2.1").submit(**LONG)
    deadline = time.monotonic() + 300
    while not any(admission.address_of(e.request, serving.profile()) == "10.1.2.1"
                  for e in admission.engine_events(_queue())) or not engine_lock.ENGINE_LOCK.waiting:
        assert time.monotonic() < deadline, "the long run did not start"
        time.sleep(0.05)
    time.sleep(1.0)
    short = from_address(url, "10.1.2.2").submit(**SHORT)
    assert outcome(short) == "answered"
    assert not long_job.done(), "the long run ended first: the test shows nothing"
    report = long_job.result(timeout=900)
    assert report["metrics"]["new_tokens"] == 256
    assert report["identical_to_plain"] is True  # interleaved with another run, greedy output is still plain's


def test_a_prompt_long_in_tokens_is_refused_with_its_count(url):
    emoji = "🦜" * 2001  # 2,001 characters, within 4,000: some 6,000 tokens
    refused = outcome(from_address(url, "10.1.3.1").submit(**dict(SHORT, prompt=emoji)))
    assert "tokens long; this server takes at most 1,024 tokens" in refused, refused
    assert outcome(from_address(url, "10.1.3.1").submit(**dict(SHORT, prompt="🦜" * 100))) == "answered"  # control


def test_the_direct_route_is_closed_and_unknown_endpoints_are_404(url):
    with httpx.Client(base_url=url, timeout=120) as http:
        direct = http.post("/gradio_api/run/speculate", json={"data": ["hi", "ngram", 8, 4, 0, 0, "default", ""]})
        assert direct.status_code == 404 and "join the queue" in direct.text
        joined = http.post("/gradio_api/call/speculate", json={"data": ["hi", "ngram", 8, 4, 0, 0, "default", ""]})
        assert joined.status_code == 200  # control: the queue's route takes the same call
        unknown = http.post("/gradio_api/queue/join", json={"data": [], "fn_index": 9999,
                                                            "session_hash": uuid.uuid4().hex})
        assert (
            unknown.status_code == 404
            and "no endpoint number 9999" in unknown.text
            and "/gradio_api/info" in unknown.text
        )
        status, text = raw_call(http, "speculate", ["hi"])  # too few values: named, not gradio's object repr
        assert status == 422 and "takes 8 values in `data`, in this order: prompt, method" in text, text
        assert "object at 0x" not in text
        status, text = raw_call(http, "replay", [])
        assert status == 422 and "takes 1 value in `data`, in this order: seconds_per_step" in text, text


@pytest.mark.quick
def test_the_ledger_counts_an_address_s_engine_seconds_over_its_window():
    now = [1000.0]
    ledger = admission.Ledger(clock=lambda: now[0])
    charge = ledger.charger("10.2.0.1")
    for _ in range(50):
        charge(0.1)  # fifty steps of 0.1 s within one second
    now[0] += 100
    ledger.charge("10.2.0.1", 3.0)
    ledger.charge("10.2.0.2", 7.0)
    assert ledger.spent("10.2.0.1", 600) == pytest.approx(8.0)
    assert ledger.spent("10.2.0.2", 600) == pytest.approx(7.0) and ledger.spent("10.2.0.3", 600) == 0
    now[0] += 550  # the first second's five seconds are out of the window, the later three are not
    assert ledger.spent("10.2.0.1", 600) == pytest.approx(3.0)
    now[0] += 100
    assert ledger.spent("10.2.0.1", 600) == 0 and "10.2.0.1" not in ledger._spent  # forgotten once empty
    now[0] += 4000  # an address never asked about again is forgotten by a later charge's sweep
    ledger.charge("10.2.0.4", 1.0)
    assert "10.2.0.2" not in ledger._spent and ledger.spent("10.2.0.4", 600) == 1.0


def test_engine_time_is_charged_to_the_thread_s_meter(default_target):
    """Each hold of the engine lock is charged to the meter of the thread that holds it, and a run's worker
    takes its starter's meter."""
    charged = []
    with engine_lock.metering(charged.append):
        request = run_request.RunRequest("Say hello.", "ngram", settings=DecodeSettings(max_new_tokens=8, gamma=4))
        run = live.LiveRun(request, default_target, None)
        run.start()
    run.join(300)
    assert run.phase == live.DONE
    steps = len(run.speculative.steps) + len(run.plain.steps)
    assert len(charged) >= steps and all(seconds >= 0 for seconds in charged)
    before = len(charged)  # control: outside a meter nothing is charged
    with engine_lock.ENGINE_LOCK:
        pass
    assert len(charged) == before


@pytest.mark.quick
def test_waiting_requests_take_slots_by_address_in_turn():
    flood, other = "10.3.0.1", "10.3.0.2"
    waiting = [flood] * 6 + [other, flood, other]
    order = admission.fair_order(waiting, collections.Counter({flood: 4}))
    assert [waiting[i] for i in order][:2] == [other, other]  # the flood has four running already
    assert order[2:] == [0, 1, 2, 3, 4, 5, 7]  # then the flood's, in arrival order
    assert admission.fair_order(waiting, collections.Counter()) == [0, 6, 1, 8, 2, 3, 4, 5, 7]  # in turn
    # control: arrival order alone would put the other address seventh
    assert waiting.index(other) == 6
