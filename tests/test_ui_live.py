"""The app's run driver (specviz/service/live.py) on the real default model, without a server: worker threads,
step mode, stop, engine-time accounting, the fair engine lock (engine_lock.py), form validation
(run_request.py), sessions (sessions.py)."""
import threading
import time

import pytest

from specviz import DecodeSettings, InvalidSettingError
from specviz.api import encode, make_proposer, run_once
from specviz.service import events
from specviz.proposers import PlainProposer
from specviz.service import engine_lock, live, recorded_runs, run_request, run_setup, serving
from specviz.ui import form, sessions
from specviz.service.public import Profile

PROMPT = "List the days of the week, one per line."


@pytest.fixture(scope="module")
def target(default_target):
    return default_target


def new_run(target, max_new=24, method="ngram", compare_plain=True, **settings):
    request = run_request.RunRequest(PROMPT, method, "default", None,
                                     DecodeSettings(max_new_tokens=max_new, gamma=4, **settings), compare_plain)
    return live.LiveRun(request, target, None)


def emitted_ids(steps):
    return [t.id for s in steps for t in s.emitted_tokens]


def record_turns(run) -> list[tuple[str, int]]:
    """Which run took each step, and the tokens it had written after it."""
    turns = []
    for name, stepped in (("speculative", run.speculative), ("plain", run.plain)):
        def advance(stepped=stepped, name=name, original=stepped.advance):
            step = original()
            turns.append((name, stepped.emitted))
            return step
        stepped.advance = advance
    return turns


def test_worker_runs_speculative_and_plain_in_turns(target, monkeypatch):
    monkeypatch.setattr(live, "SLICE_SECONDS", 0.0)  # a turn each step: the order is then known exactly
    run = new_run(target)
    turns = record_turns(run)
    assert run.start()
    run.join(120)
    assert run.phase == live.DONE and not run.active
    spec, plain = run.speculative, run.plain
    assert spec.done and plain.done
    reference = run_once(target, PlainProposer(), encode(target, PROMPT), DecodeSettings(max_new_tokens=24))
    assert spec.result.token_ids == reference.token_ids == plain.result.token_ids  # greedy: exact
    assert emitted_ids(spec.steps) == spec.result.token_ids
    assert run.speedup == pytest.approx(plain.engine_wall / spec.engine_wall)
    # after each speculative step plain decoding writes as many tokens, and no more than it needs to
    assert turns[0][0] == "speculative" and turns[1][0] == "plain"
    written = {"speculative": 0, "plain": 0}
    for (name, tokens), following in zip(turns, turns[1:] + [("end", 0)]):
        written[name] = tokens
        if name == "speculative" and following[0] != "speculative":
            assert following[0] == "plain" or written["plain"] >= tokens
        if name == "plain" and following[0] == "speculative":
            assert written["plain"] >= written["speculative"]
    assert sum(name == "speculative" for name, _ in turns) == len(spec.steps)
    # each run's engine time leaves out the other's turns: its wall time less the time it was suspended
    assert plain.idle_seconds > 0 and spec.idle_seconds > 0
    assert spec.engine_wall == pytest.approx(spec.result.metrics.wall_seconds - spec.idle_seconds)
    assert plain.engine_wall == pytest.approx(plain.result.metrics.wall_seconds - plain.idle_seconds)
    assert run.doubt is None or "busy" not in run.doubt  # a sentence, or None on a quiet machine
    assert run.target is None and spec.closed  # models and caches released when the run ends
    assert run.report().to_dict()["identical_to_plain"] is True


def test_a_hold_for_the_page_is_left_out_of_the_measured_time(target):
    run = new_run(target, max_new=16)
    turns = record_turns(run)
    original = run.speculative.advance
    held = []

    def advance():  # the page draws after the second step: a wait in which no step may start
        step = original()
        if len(run.speculative.steps) == 2:
            # at least half a second, and five times the longest step so far (the first includes the prefill), so
            # that a step that took the wait in is told from a step slowed by a loaded machine
            held.append(max(0.5, 5 * max(run.speculative.durations + run.plain.durations)))
            run.hold(held[0])
        return step

    run.speculative.advance = advance
    assert run.start()
    run.join(600)  # a wait, not a speed check
    assert run.phase == live.DONE and len(turns) > 3 and len(held) == 1
    spec, plain = run.speculative, run.plain
    assert spec.idle_seconds + plain.idle_seconds >= held[0]
    for stepped in (spec, plain):
        assert stepped.engine_wall == pytest.approx(stepped.result.metrics.wall_seconds - stepped.idle_seconds)
    assert max(spec.durations) < held[0] or max(plain.durations) < held[0]  # the wait is in neither run's steps


def test_quick_clicks_on_next_step_each_take_a_step(target):
    run = new_run(target, compare_plain=False)
    run.hold(0.3)  # the first click's step waits: the second click comes while it is pending
    assert run.take_steps(1) == "started"
    assert run.take_steps(1) == "queued"
    run.join(60)
    assert len(run.speculative.steps) == 2 and run.phase == live.PAUSED
    assert run.take_steps(None) == "started"  # Resume
    assert run.take_steps(1) is None  # running to the end: Next step waits for Pause
    run.join(120)
    assert run.phase == live.DONE


def test_step_mode_advances_one_step_at_a_time(target):
    run = new_run(target, compare_plain=False)
    assert run.phase == live.READY
    for expected in (1, 2, 3):
        assert run.start(max_steps=1)
        run.join(60)
        assert len(run.speculative.steps) == expected and run.phase == live.PAUSED
    time.sleep(0.3)  # a pause between steps is not engine time
    run.start()
    run.join(120)
    assert run.phase == live.DONE and run.paused_ever
    spec = run.speculative
    assert spec.idle_seconds >= 0.3
    assert spec.engine_wall == pytest.approx(spec.result.metrics.wall_seconds - spec.idle_seconds)
    elapsed = [spec.engine_elapsed(i) for i in range(len(spec.steps))]
    assert elapsed == sorted(elapsed) and elapsed[-1] < spec.result.metrics.wall_seconds - 0.3
    continuous = run_once(target, make_proposer("ngram", target), encode(target, PROMPT),
                          DecodeSettings(max_new_tokens=24, gamma=4))
    assert spec.result.token_ids == continuous.token_ids


def test_pause_then_stop_releases_everything(target):
    run = new_run(target, max_new=200)
    run.start()
    while len(run.speculative.steps) < 2:
        time.sleep(0.01)
    run.pause()
    run.join(30)
    assert run.phase == live.PAUSED and not run.active
    paused_at = len(run.speculative.steps)
    run.stop()
    assert run.phase == live.STOPPED and run.speculative.closed and run.plain.closed
    assert len(run.speculative.steps) == paused_at
    assert not run.start()  # a stopped run stays stopped
    assert engine_lock.ENGINE_LOCK.waiting == 0


def test_stop_while_running_ends_within_a_step(target):
    run = new_run(target, max_new=300)
    run.start()
    while not run.speculative.steps:
        time.sleep(0.01)
    started = time.monotonic()
    run.stop()
    run.join(30)
    assert not run.active and run.phase == live.STOPPED
    assert time.monotonic() - started < 10  # one step at most (a step is ~0.1-1 s on a busy 2-core CPU)
    assert len(run.speculative.steps) < 300 and run.speculative.result is None
    assert engine_lock.ENGINE_LOCK.waiting == 0


def test_errors_inside_a_run_are_reported_not_raised(target, monkeypatch):
    run = new_run(target, compare_plain=False)

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(run.speculative, "advance", broken)
    run.start()
    run.join(10)
    assert run.phase == live.FAILED and "out of memory" in run.error


def test_fair_lock_serves_in_arrival_order():
    lock = engine_lock.FairLock()
    order = []
    lock.__enter__()
    threads = []
    for i in range(4):
        thread = threading.Thread(target=lambda i=i: (lock.__enter__(), order.append(i),
                                                      lock.__exit__(None, None, None)))
        thread.start()
        threads.append(thread)
        while lock.waiting < i + 2:  # the holder plus the threads queued so far
            time.sleep(0.001)
    lock.__exit__(None, None, None)
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2, 3] and lock.waiting == 0


@pytest.mark.parametrize("values, fragment", [
    (dict(max_new_tokens=0, gamma=4, temperature=0), "max-new-tokens"),
    (dict(max_new_tokens=16, gamma=0, temperature=0), "gamma"),
    (dict(max_new_tokens=16, gamma=2.5, temperature=0), "gamma"),
    (dict(max_new_tokens=16, gamma=4, temperature=-1), "temperature"),
    (dict(max_new_tokens=16, gamma=4, temperature="hot"), "temperature"),
    (dict(max_new_tokens=16, gamma=4, temperature=0.5, top_p=0), "top-p"),
    (dict(max_new_tokens=16, gamma=4, temperature=0, seed=-3), "seed"),
    (dict(max_new_tokens=16, gamma=4, temperature=0, seed=float("nan")), "seed"),
    (dict(max_new_tokens=16, gamma=4, temperature=0, draft_stop=1.0), "draft-stop"),
])
def test_form_values_are_validated(values, fragment):
    with pytest.raises(InvalidSettingError, match=fragment):
        form.settings_from_form(**values)


def test_form_values_from_widgets():
    settings = form.settings_from_form(96.0, 4.0, 0.7, 0.9, None)  # sliders give floats, an empty box None
    chosen = (settings.max_new_tokens, settings.gamma, settings.temperature, settings.top_p, settings.seed)
    assert chosen == (96, 4, 0.7, 0.9, None)
    assert settings.draft_stop == 0.0
    assert form.settings_from_form(96.0, 4.0, 0, 1, 0, 0, 0.5).draft_stop == 0.5
    assert run_request.model_name("  none ") is None
    assert run_request.model_name(" Qwen/Qwen2.5-0.5B ") == "Qwen/Qwen2.5-0.5B"


def test_sessions_track_models_in_use_and_evict_the_oldest_idle_first(target, monkeypatch):
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 3)
    run = new_run(target, compare_plain=False)  # made, not started: a run waiting in step mode
    sessions.session("test-a").run = run
    assert "default" in sessions.models_in_use()
    for key in ("test-b", "test-c", "test-d"):
        sessions.session(key)
    assert run.phase == live.READY and sessions.find_session("test-a") is not None  # the idle test-b went first
    assert sessions.find_session("test-b") is None
    handlers = [sessions.session(key).watch() for key in ("test-c", "test-d")]  # busy: handlers running
    sessions.session("test-e")
    assert run.phase == live.STOPPED  # no idle session left: the paused run's went, its run stopped
    assert "default" not in sessions.models_in_use()
    del handlers
    for key in ("test-c", "test-d", "test-e"):
        sessions.end_session(key)


def test_a_session_with_a_run_going_is_never_evicted(target, monkeypatch):
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 2)
    going = new_run(target, max_new=512, compare_plain=False)
    sessions.session("test-going").run = going
    handler = sessions.session("test-handler").watch()  # a handler of this session is running (a replay, a tab)
    going.start()
    try:
        for i in range(20):
            sessions.session(f"test-flood-{i}")
        assert going.active and going.phase == live.RUNNING  # not stopped by the flood
        assert sessions.find_session("test-going") is not None and sessions.find_session("test-handler") is not None
        # control: the same flood without the running worker and handler pushes them out
        going.stop()
        going.join(30)
        del handler
        for i in range(20, 24):
            sessions.session(f"test-flood-{i}")
        assert sessions.find_session("test-going") is None and sessions.find_session("test-handler") is None
    finally:
        going.stop()
        for i in range(24):
            sessions.end_session(f"test-flood-{i}")


@pytest.mark.quick
def test_the_pool_keeps_the_models_of_a_sessions_unfinished_run():
    """The pool (serving.py) asks the sessions which models their unfinished runs use, the pool launch makes too."""
    released = threading.Event()

    def records():  # a GPU call still computing: the session's run is unfinished
        released.wait(60)
        yield events.Ended(live.STOPPED, None)

    request = run_request.RunRequest(PROMPT, "draft", "test-target", "test-drafter")
    sessions.session("test-held").run = recorded_runs.RecordedRun(request, records())
    try:
        assert {"test-target", "test-drafter"} <= serving.pool().in_use()
        with serving.served_as(Profile(memory_budget=2 ** 30)):
            assert {"test-target", "test-drafter"} <= serving.pool().in_use()
    finally:
        released.set()
        sessions.end_session("test-held")
    assert not {"test-target", "test-drafter"} & serving.pool().in_use()  # control: its session is gone


@pytest.mark.quick
def test_the_session_cap_follows_memory_and_spares_busy_sessions():
    idle, paused, busy = sessions.IDLE, sessions.PAUSED_RUN, sessions.BUSY
    held = [(busy, 900), (idle, 100), (paused, 300), (idle, 50), (busy, 10)]  # least recently used first
    assert sessions.sessions_to_drop(held, most=10, memory=1_000) == [1, 3, 2]  # idle ones, then the paused run
    assert sessions.sessions_to_drop(held, most=10, memory=1_300) == [1]
    assert sessions.sessions_to_drop(held, most=3, memory=10 ** 9) == [1, 3]  # the count alone
    assert sessions.sessions_to_drop([(busy, 10 ** 9)] * 5, most=1, memory=1) == []  # busy ones never
    # control: counted alone, five sessions under a cap of ten keep 1,360 units whatever the memory
    assert sessions.sessions_to_drop(held, most=10, memory=10 ** 9) == []


def test_a_call_with_nothing_to_act_on_makes_no_session():
    before = len(sessions.kept_sessions())
    assert sessions.find_session("test-nobody") is None
    blank = sessions.existing_session_of(type("Request", (), {"session_hash": "test-nobody"})())
    assert blank.run is None and len(sessions.kept_sessions()) == before
    sessions.remember_width("test-nobody", True)  # a page's width, told before its first run
    assert len(sessions.kept_sessions()) == before
    assert sessions.session("test-nobody").narrow  # its first run's session takes it
    sessions.end_session("test-nobody")


def test_an_app_run_warms_up_once(monkeypatch):
    """Loading the models does not warm up; the run does, once, for its own settings and proposer."""
    calls = []
    monkeypatch.setattr(run_setup, "warm_up", lambda *args, **kwargs: calls.append((args[1:], kwargs)))
    request = run_request.RunRequest("Count to five.", "ngram",
                                     settings=DecodeSettings(max_new_tokens=8, gamma=3, tree=6))
    target, draft = run_setup.load_models(request)
    live.LiveRun(request, target, draft)
    assert len(calls) == 1
    (positions, _, proposers), kwargs = calls[0]
    assert positions == 4 and kwargs["tree"] == 6 and proposers[0].name == "ngram"


def test_the_draft_method_on_the_default_target_drafts_with_its_distilled_model():
    assert run_request.drafter_for("draft", "default", "none") == "distilled"
    assert run_request.drafter_for("draft", "default", "default") == "default"  # a chosen drafter stands
    # nothing ships for it
    assert run_request.drafter_for("draft", "HuggingFaceTB/SmolLM2-1.7B-Instruct", "none") is None
    assert run_request.drafter_for("adaptive", "default", "none") is None  # adaptive drafts with EAGLE then
    # a method without a drafter ignores the field
    assert run_request.drafter_for("ngram", "default", "default") is None


def test_next_step_clicked_after_pause_before_the_pause_lands_each_take_a_step(target):
    """Pause lands after the current step (and plain decoding's catch-up): Next step clicked in between is not
    lost (it used to answer "press Pause first"); each click is one more step after the pause's."""
    run = new_run(target, max_new=48, compare_plain=False)
    assert run.start()
    while len(run.speculative.steps) < 2:
        time.sleep(0.01)
    run.hold(0.5)  # the next step waits: Pause and the clicks come while the worker is between steps
    at_pause = len(run.speculative.steps)
    run.pause()
    assert [run.take_steps(1) for _ in range(3)] == ["queued"] * 3
    run.join(60)
    assert run.phase == live.PAUSED
    # the step in flight when Pause came (held, then taken), then one a click
    assert len(run.speculative.steps) - at_pause in (3, 4)


def test_the_status_line_says_what_the_worker_does_in_step_mode(target, monkeypatch):
    """After step 0, plain decoding catches up before the pause: the status line says so, not "step 1"."""
    from specviz.ui.readouts import status_of

    # no slice's catch-up before the pause's (on a busy machine one step can outlast a slice)
    monkeypatch.setattr(live, "SLICE_SECONDS", 1e9)
    run = new_run(target)
    said = []
    original = run.plain.advance

    def advance():
        said.append(status_of(run))
        return original()

    run.plain.advance = advance
    assert run.start(max_steps=1)
    run.join(60)
    assert said and run.phase == live.PAUSED and len(run.speculative.steps) == 1
    assert all("step 1" not in text and "Step 0 done" in text for text in said), said
    assert "Paused after step 0" in status_of(run)


def test_replay_says_where_it_is_and_that_it_is_done(target):
    from specviz.ui.readouts import replay_status, status_of

    run = new_run(target, max_new=16, compare_plain=False)
    assert run.start()
    run.join(60)
    n = len(run.speculative.steps)
    assert n > 2
    assert f"steps 0 to {n - 1}" in replay_status(run, 1) and "Replaying: step 1" in replay_status(run, 1)
    last = replay_status(run, n - 1)
    assert "Replay done" in last and f"all {n} steps" in last
    assert f"{n} steps in all" in status_of(run, session_cursor=1)
