"""When a handler's work must end: its session pressed Stop, or gradio dropped its event (the caller cancelled
it, or its connection was lost). Handlers check a Cancel between engine steps (never inside one), so that the
engine and its lock are free within a step or two.

Gradio stops iterating a streaming handler that lost its caller and closes it (GeneratorExit at its yield); a
handler that is a plain function, or that is inside a long iteration, learns of it only from the queue's record
of its event, read here: the event is gone from the running jobs (a cancel ends its task) or marked not alive
(its connection dropped). That record is gradio's (pinned in requirements.txt); tests/test_ui_cancel.py drives
both ways against a served app, so a gradio that changes it fails there."""
from __future__ import annotations

import threading
import time


def current_event() -> tuple[object, str] | None:
    """(gradio's queue, event id) of the event whose handler runs in this thread; None outside one."""
    try:
        from gradio.context import LocalContext
    except ImportError:  # pragma: no cover - the engine without gradio
        return None
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    return (queue, event_id) if queue is not None and event_id else None


def event_alive(queue, event_id: str) -> bool:
    """Whether gradio still runs the event for someone: it is among the running jobs and its caller is there."""
    for job in list(getattr(queue, "active_jobs", None) or ()):
        for event in job or ():
            if getattr(event, "_id", None) == event_id:
                return bool(getattr(event, "alive", True))
    return False


class Cancel:
    """One handler's stop signal: set() by Stop; also set, as far as is_set() can tell, once gradio dropped the
    event the handler was started for, or once it has run `seconds` (the public profile's limit a request)."""

    def __init__(self, event: tuple[object, str] | None = None, seconds: float | None = None):
        self._stop = threading.Event()
        self._event = event
        self._deadline = time.monotonic() + seconds if seconds else None
        self._seconds = seconds
        self.reason = ""  # what a person is told when it stopped by itself (the time limit)

    @classmethod
    def for_this_event(cls, seconds: float | None = None) -> "Cancel":
        return cls(current_event(), seconds)

    def set(self) -> None:
        self._stop.set()

    def is_set(self) -> bool:
        if self._stop.is_set():
            return True
        if self._event is not None and not event_alive(*self._event):
            self._stop.set()
            return True
        if self._deadline is not None and time.monotonic() > self._deadline:
            self.reason = (f"Stopped: this server gives one request at most {self._seconds:.0f} s, so that everyone "
                           "gets a turn. Try fewer tokens or a smaller model.")
            self._stop.set()
            return True
        return False
