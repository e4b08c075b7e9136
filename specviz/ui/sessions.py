"""The sessions: the state of each browser tab or API client (gradio's session hash), kept here rather than in
gr.State (which gradio deep-copies), made on a session's first engine request and dropped, least recently used
idle ones first, past MAX_SESSIONS or SESSION_MEMORY. The model pool keeps the models of their unfinished runs
loaded (models_in_use)."""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from ..service import serving
from .cancel import Cancel
from ..service.live import LiveRun
from ..service.recorded_runs import RecordedRun


@dataclass
class Session:
    run: LiveRun | RecordedRun | None = None
    cursor: int | None = None  # the step shown highlighted (step mode, replay); None: follow the run
    replaying: bool = False
    narrow: bool = False  # the page is narrower than a phone's (app.NARROW_WIDTH): charts stacked
    # the stop signals of the session's handlers now running (weak: a finished handler's goes by itself)
    cancels: weakref.WeakSet = field(default_factory=weakref.WeakSet)

    def watch(self) -> Cancel:
        """A stop signal for a handler starting now: set by this session's Stop, or by gradio dropping the event."""
        cancel = Cancel.for_this_event(serving.profile().run_seconds)
        self.cancels.add(cancel)
        return cancel

    def stop_all(self) -> None:
        """Stop: every handler of the session ends its work at its next step."""
        for cancel in list(self.cancels):
            cancel.set()


MAX_SESSIONS = 256
# what the sessions' finished runs may hold in all: part of the reserve the models' budget leaves
SESSION_MEMORY = 512 * 2 ** 20
STEP_BYTES = 8 * 2 ** 10  # a step's records in memory, at most (a tree's step holds the most)
_sessions: OrderedDict[str, Session] = OrderedDict()
_sessions_lock = threading.Lock()
_sessions_pid = os.getpid()  # the process that serves the sessions: a GPU worker forked from it holds a stale copy
_widths: OrderedDict[str, bool] = OrderedDict()  # a page's layout, told before its first run made its session


def held_bytes(state: Session) -> int:
    """What a session's run holds in memory (its steps' records), about."""
    run = state.run
    if run is None:
        return 0
    return STEP_BYTES * (len(run.speculative.steps) + (len(run.plain.steps) if run.plain is not None else 0))


IDLE, PAUSED_RUN, BUSY = 0, 1, 2  # what a session is doing, in the order sessions go (BUSY ones never)


def standing(state: Session) -> int:
    """BUSY: its run is going or a handler of it is running; PAUSED_RUN: its run waits in step mode (it holds
    its caches); IDLE: nothing in progress."""
    run = state.run
    if (run is not None and run.active) or len(state.cancels) > 0:
        return BUSY
    return PAUSED_RUN if run is not None and not run.finished else IDLE


def sessions_to_drop(held: list[tuple[int, int]], most: int, memory: int) -> list[int]:
    """Which sessions go, given (standing, bytes) of each from the least to the most recently used: idle ones
    first, then those paused in step mode, each kind least recently used first, until at most `most` remain and
    they hold at most `memory` bytes. A BUSY session never goes: a run in progress is someone's (and runs in
    progress are bounded by the queue's admission)."""
    count, total = len(held), sum(size for _, size in held)
    dropped = []
    for kind in (IDLE, PAUSED_RUN):
        for index, (standing_, size) in enumerate(held):
            if count <= most and total <= memory:
                return dropped
            if standing_ != kind:
                continue
            dropped.append(index)
            count -= 1
            total -= size
    return dropped


def session(key: str) -> Session:
    """The state of one browser tab or API client (gradio's session hash), made on its first engine request;
    past MAX_SESSIONS or SESSION_MEMORY, the least recently used idle sessions go (sessions_to_drop)."""
    with _sessions_lock:
        state = _sessions.get(key)
        if state is None:
            state = _sessions[key] = Session(narrow=_widths.pop(key, False))
        _sessions.move_to_end(key)
        keys = list(_sessions)
        # the session asked for stays, as busy: its request is starting now
        drop = sessions_to_drop([(BUSY if k == key else standing(_sessions[k]), held_bytes(_sessions[k]))
                                 for k in keys], MAX_SESSIONS, SESSION_MEMORY)
        evicted = [_sessions.pop(keys[i]) for i in drop]
    for old in evicted:
        if old.run is not None:
            old.run.stop()
    return state


def find_session(key: str) -> Session | None:
    """A session that exists (None otherwise): what a call with nothing to start (Stop, Pause, Replay, the step
    slider) acts on. Such a call makes no session, so that it can push no one's out."""
    with _sessions_lock:
        state = _sessions.get(key)
        if state is not None:
            _sessions.move_to_end(key)
        return state


def remember_width(key: str, narrow: bool) -> None:
    """A page's layout (told once as it loads): kept on its session, or until its first run makes one."""
    state = find_session(key)
    if state is not None:
        state.narrow = narrow
        return
    with _sessions_lock:
        _widths[key] = narrow
        while len(_widths) > 4 * MAX_SESSIONS:
            _widths.popitem(last=False)


def live_runs() -> list:
    """The runs the sessions hold now (a measurement that drives the app from outside finds its own here)."""
    with _sessions_lock:
        return [state.run for state in _sessions.values() if state.run is not None]


def kept_sessions() -> dict[str, Session]:
    """The sessions kept now, by key (a copy: the table goes on changing)."""
    with _sessions_lock:
        return dict(_sessions)


def session_key(request) -> str:
    """A gradio request's session hash (API calls without one share "anonymous")."""
    return getattr(request, "session_hash", None) or "anonymous"


def session_of(request) -> Session:
    return session(session_key(request))


def existing_session_of(request) -> Session:
    """The request's session if it has one, else an empty one that is not kept (nothing to act on)."""
    return find_session(session_key(request)) or Session()


def end_session(key: str) -> None:
    with _sessions_lock:
        state = _sessions.pop(key, None)
    if state is not None and state.run is not None:
        state.run.stop()


def models_in_use() -> set[str]:
    """The models the sessions' unfinished runs use. None in a GPU worker: its copy of the sessions is the
    app's at the fork, whose runs it does not hold (a run there holds its models itself, through the pool); taken for
    its own, a worker kept for many calls would never unload them."""
    if os.getpid() != _sessions_pid:
        return set()
    with _sessions_lock:
        runs = [s.run for s in _sessions.values() if s.run is not None and not s.run.finished]
    names = set()
    for run in runs:
        names.add(run.request.target)
        if run.request.draft:
            names.add(run.request.draft)
    return names


serving.count_in_use(models_in_use)  # the pool keeps a session's models while its run is unfinished
