"""A lesson measured for the Learn tab and its endpoints: in a GPU call, one record at a time under the engine lock
(other users' steps in between), and the status line that counts how far it has come."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ..errors import SpecvizError
from ..lessons.progress import Progress, left_text, progress_of, time_left
from ..service import events
from ..service.calls import lesson_records
from . import render
from .endpoint import pull, stopped_message

from ..service.gpu import gpu


def last_record(target: str, start: Callable, cancel, prompt: str | None = None) -> object:
    """A lesson run to its end in a GPU call, as an endpoint answers it: its last record, or SpecvizError with
    the lesson's failure or, when the caller cancelled, the stopped message."""
    record = None
    for event in pull(gpu(lesson_records)(target, start, prompt), cancel):
        if isinstance(event, events.Failed):
            raise SpecvizError(event.message)
        if isinstance(event, events.LessonRecord):
            record = event.record
    if cancel.is_set() or record is None:
        raise SpecvizError(stopped_message(cancel))
    return record


def stream_lesson(cancel, status, target: str, start: Callable, draw: Callable) -> Iterator[dict]:
    """Loads the target, then runs the lesson one record at a time (other users' steps in between), in a GPU
    call (lesson_records: `start` must pickle), stopping between records when Stop is pressed. The status line
    says how far it has come and the time left; what is drawn before the end is partial, and says so."""
    yield {status: render.status_html(f"Loading {target}…", "info")}
    last, began, samples = None, time.monotonic(), []
    for event in pull(gpu(lesson_records)(target, start), cancel):
        if isinstance(event, events.Failed):
            yield {status: render.status_html(event.message, "error")}
            return
        if isinstance(event, events.LessonRecord):
            last = event.record
            done = progress_of(last)
            if done is not None:
                samples.append((time.monotonic(), done.done))
            yield {status: measuring_html(done, samples, time.monotonic() - began), **draw(last, False)}
        else:
            began = time.monotonic()
            yield {status: measuring_html(None, [], 0.0)}
    if cancel.is_set():
        yield {status: render.status_html(stopped_message(cancel) + partial_note(last), "warn")}
    elif last is not None:
        yield {status: render.status_html(f"Done in {elapsed_text(time.monotonic() - began)}: measured just now "
                                          "on this machine.", "ok"), **draw(last, True)}


def elapsed_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def measuring_html(done: Progress | None, samples: list[tuple[float, int]], elapsed: float) -> str:
    """The status line while a lesson runs: "n of N" in its unit, the time so far and the time left at the
    recent pace, and that what is drawn is partial."""
    if done is None:
        return render.status_html(f"Measuring… {elapsed_text(elapsed)}", "info")
    left = left_text(time_left(samples, done.total))
    return render.status_html(f"Measuring: {done} · {elapsed_text(elapsed)}" + (f" · {left}" if left else "")
                              + ". Partial results below until it is done.", "info")


def partial_note(record) -> str:
    done = progress_of(record) if record is not None else None
    return f" What is shown is partial: {done}." if done is not None and not done.finished else ""
