"""Fairness at the queue's door: a request is refused at once, before it takes a place in gradio's queue, when
it is over a share the public profile gives:
- an engine request, when its session or its client address already has as many waiting or running as the
  profile allows (public.admission_refusal), or when its address has taken its budget of engine seconds in the
  profile's window while another address is waiting or running (public.budget_refusal, counted by LEDGER);
- a Replay, when its session already has one going or REPLAYS are going on the server (public.replay_refusal).
One student's flood then fills neither the queue, the engine nor the worker threads. Engine requests waiting for
a slot are taken by address in turn, not in arrival order (fair_order): another address's run starts at the next
free slot, ahead of a flood's places that arrived before it. The refusal is an HTTP 429 whose detail is the
sentence a browser shows.

A call that names no endpoint (an fn_index the app does not have) is answered 404 with where the endpoints are
listed, not gradio's HTTP 500; one with too few values in `data` is answered 422 with the values the endpoint
takes, not gradio's list of component objects.

The counts are read from gradio's queue (its waiting events and running jobs, each with its session and the
request it came with): gradio offers no hook for this, so the queue's push is wrapped; the queue is gradio's,
pinned in requirements.txt, and tests/test_ui_fairness.py floods a served app to check it still works."""
from __future__ import annotations

import collections
import inspect
import threading
import time

from fastapi import HTTPException

from ..service.public import Profile, admission_refusal, budget_refusal, client_address, replay_refusal

ENGINE = "engine"  # the concurrency id of every event that runs the engine (app.py)
REPLAY = "replay"  # the concurrency id of Replay (app.py)
REPLAYS = 8  # replays going at once, all users together: each sends a frame a step


class Ledger:
    """Engine seconds each client address took, over a sliding window (kept by the second, for at most `keep`
    seconds: an address not seen for that long is forgotten, so that many addresses do not pile up)."""

    def __init__(self, clock=time.monotonic, keep: float = 3600.0):
        self._clock = clock
        self._keep = keep
        self._lock = threading.Lock()
        self._spent: dict[str, collections.deque] = {}
        self._swept = clock()

    def charge(self, address: str, seconds: float) -> None:
        now = int(self._clock())
        with self._lock:
            entries = self._spent.setdefault(address, collections.deque())
            if entries and entries[-1][0] == now:
                entries[-1][1] += seconds
            else:
                entries.append([now, seconds])
            if now - self._swept > self._keep:
                self._sweep(now)

    def _sweep(self, now: float) -> None:
        self._swept = now
        for address in [a for a, entries in self._spent.items() if entries[-1][0] < now - self._keep]:
            del self._spent[address]

    def charger(self, address: str):
        """What an engine request's time is charged to (engine_lock.metering)."""
        return lambda seconds: self.charge(address, seconds)

    def spent(self, address: str, window: float) -> float:
        since = self._clock() - window
        with self._lock:
            entries = self._spent.get(address)
            if entries is None:
                return 0.0
            while entries and entries[0][0] < since:
                entries.popleft()
            if not entries:
                del self._spent[address]
                return 0.0
            return sum(seconds for _, seconds in entries)


LEDGER = Ledger()


def address_of(request, profile: Profile) -> str:
    """The client address a request (gradio's or the queue's) counts against (public.client_address)."""
    client = getattr(request, "client", None)
    headers = getattr(request, "headers", None) or {}
    return client_address(getattr(client, "host", None), headers.get("x-forwarded-for"), profile)


def _events(queue, concurrency_id: str) -> list:
    """Events of `concurrency_id` waiting in the queue or running (and still wanted)."""
    waiting = [e for q in list(queue.event_queue_per_concurrency_id.values()) for e in list(q.queue)]
    running = [e for job in list(queue.active_jobs) if job for e in job if e.alive]
    return [e for e in waiting + running if e.concurrency_id == concurrency_id]


def engine_events(queue) -> list:
    """Engine events waiting in the queue or running (and still wanted)."""
    return _events(queue, ENGINE)


def fair_order(waiting: list[str], running: collections.Counter) -> list[int]:
    """The order in which waiting requests (their addresses, in arrival order) take the next free slots: by how
    many requests their address already has running or waiting ahead of them, then by arrival. A flood's tenth
    place then waits behind another address's first."""
    seen = collections.Counter(running)
    ranks = []
    for index, address in enumerate(waiting):
        ranks.append((seen[address], index))
        seen[address] += 1
    return [index for _, index in sorted(ranks)]


def reorder_fairly(queue, profile: Profile) -> None:
    """Puts the engine requests waiting in gradio's queue in fair_order (the queue takes its first)."""
    event_queue = queue.event_queue_per_concurrency_id.get(ENGINE)
    if event_queue is None or len(event_queue.queue) < 2:
        return
    waiting = list(event_queue.queue)
    running = collections.Counter(address_of(e.request, profile) for job in list(queue.active_jobs) if job
                                  for e in job if e.alive and e.concurrency_id == ENGINE)
    order = fair_order([address_of(e.request, profile) for e in waiting], running)
    event_queue.queue[:] = [waiting[i] for i in order]


def parameter_names(fn) -> list[str]:
    """The names of what an event's function takes from `data`, as the API lists them."""
    try:
        names = [name for name in inspect.signature(fn.fn).parameters if name != "request"]
    except (TypeError, ValueError):
        names = []
    return names if len(names) == len(fn.inputs) else [f"value {i + 1}" for i in range(len(fn.inputs))]


def missing_values(fn, body) -> str | None:
    """Why a call's `data` cannot be given to its function (None: it can): fewer values than it takes."""
    data = body.data if isinstance(body.data, list) else []
    taken = {len(fn.inputs), sum(not getattr(block, "skip_api", False) for block in fn.inputs)}
    if fn.fn is None or fn.cancels or len(data) >= min(taken):
        return None
    names = parameter_names(fn)
    count = f"{len(fn.inputs)} value" + ("s" if len(fn.inputs) != 1 else "")
    return (f"this endpoint takes {count} in `data`, in this order: {', '.join(names)}; it got {len(data)}: "
            "see /gradio_api/info")


def refusal(fn, body, request, queue, profile: Profile, ledger: Ledger) -> str | None:
    """Why the request for `fn` is refused at the door (None: admitted)."""
    if fn.concurrency_id == ENGINE:
        events = engine_events(queue)
        address = address_of(request, profile)
        addresses = [address_of(e.request, profile) for e in events]
        return (admission_refusal(sum(e.session_hash == body.session_hash for e in events), addresses.count(address),
                                  profile)
                or budget_refusal(ledger.spent(address, profile.client_window),
                                  any(other != address for other in addresses), profile))
    if fn.concurrency_id == REPLAY:
        events = _events(queue, REPLAY)
        return replay_refusal(sum(e.session_hash == body.session_hash for e in events), len(events), REPLAYS)
    return None


def admit_fairly(blocks, profile: Profile, ledger: Ledger = LEDGER) -> None:
    """Wraps the queue of `blocks` (after blocks.queue()) so that an unknown fn_index is answered 404 and, in
    the public profile, requests over its shares are refused."""
    queue = blocks._queue
    push = queue.push

    async def push_fairly(body, request, username):
        fn = blocks.fns.get(body.fn_index) if body.fn_index is not None else None
        if body.fn_index is not None and fn is None:
            raise HTTPException(status_code=404, detail=f"this app has no endpoint number {body.fn_index!r}: its "
                                                        "endpoints are listed at /gradio_api/info")
        missing = missing_values(fn, body) if fn is not None else None
        if missing is not None:
            raise HTTPException(status_code=422, detail=missing)
        if profile.public and fn is not None:
            refused = refusal(fn, body, request, queue, profile, ledger)
            if refused is not None:
                raise HTTPException(status_code=429, detail=refused)
        pushed = await push(body, request, username)
        if profile.public and fn is not None and fn.concurrency_id == ENGINE:
            reorder_fairly(queue, profile)  # in the event loop, as the queue takes events: no step between
        return pushed

    queue.push = push_fairly
