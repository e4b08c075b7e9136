"""Fairness at the queue's door: a request for the engine is refused at once, before it takes a place in gradio's
queue, when its session or its client address already has as many waiting or running as the public profile
allows (public.admission_refusal). One student's flood then fills neither the queue nor the engine, and another's
run starts as soon as a slot is free. The refusal is an HTTP 429 whose detail is the sentence a browser shows.

The counts are read from gradio's queue (its waiting events and running jobs, each with its session and the
request it came with): gradio offers no hook for this, so the queue's push is wrapped; the queue is gradio's,
pinned in requirements.txt, and tests/test_ui_fairness.py floods a served app to check it still works."""
from __future__ import annotations

from fastapi import HTTPException

from ..public import Profile, admission_refusal, client_address

ENGINE = "engine"  # the concurrency id of every event that runs the engine (app.py)


def _address(request, profile: Profile) -> str:
    client = getattr(request, "client", None)
    headers = getattr(request, "headers", None) or {}
    return client_address(getattr(client, "host", None), headers.get("x-forwarded-for"), profile)


def engine_events(queue) -> list:
    """Engine events waiting in the queue or running (and still wanted)."""
    waiting = [e for q in list(queue.event_queue_per_concurrency_id.values()) for e in list(q.queue)]
    running = [e for job in list(queue.active_jobs) if job for e in job if e.alive]
    return [e for e in waiting + running if e.concurrency_id == ENGINE]


def admit_fairly(blocks, profile: Profile) -> None:
    """Wraps the queue of `blocks` (after blocks.queue()) so that engine requests over the profile's limits are
    refused. Nothing changes for a profile without limits (a local user)."""
    if profile.per_session is None and profile.per_client is None:
        return
    queue = blocks._queue
    push = queue.push

    async def push_fairly(body, request, username):
        fn = blocks.fns.get(body.fn_index) if body.fn_index is not None else None
        if fn is not None and fn.concurrency_id == ENGINE:
            events = engine_events(queue)
            address = _address(request, profile)
            refusal = admission_refusal(sum(e.session_hash == body.session_hash for e in events),
                                        sum(_address(e.request, profile) == address for e in events), profile)
            if refusal is not None:
                raise HTTPException(status_code=429, detail=refusal)
        return await push(body, request, username)

    queue.push = push_fairly
