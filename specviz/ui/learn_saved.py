"""Lessons saved by `python -m specviz learn --out` or --json, opened in the Learn tab: the files read (a bad one
reported, never raised) and the status lines that say the run shown was measured elsewhere."""
from __future__ import annotations

import html
import os

from ..lessons.saved import SavedLesson, SavedLessonError, load_lessons
from . import render

SAVED_MAX_BYTES = 20_000_000  # a saved lesson is tens of kilobytes; anything this large is not one


def read_saved(paths) -> tuple[dict[str, SavedLesson], list[str]]:
    """Lessons saved by `specviz learn --out` (a file a lesson) or --json (a file a run), by lesson key (a later
    file of one lesson wins), and one line for each file that is not one: a bad file is reported, never raised."""
    if isinstance(paths, (str, bytes)) or hasattr(paths, "name"):
        paths = [paths]
    found, errors = {}, []
    for path in paths or []:
        path = getattr(path, "name", path)
        name = os.path.basename(str(path))
        try:
            if os.path.getsize(path) > SAVED_MAX_BYTES:
                raise SavedLessonError(f"{name} is {os.path.getsize(path) / 1e6:.0f} MB: not a saved lesson")
            with open(path, "rb") as handle:
                text = handle.read()
        except OSError as error:
            errors.append(f"{name}: cannot be read ({error.strerror or error})")
            continue
        except SavedLessonError as error:
            errors.append(str(error))
            continue
        try:  # a file of --out holds one lesson, a file of --json every lesson of a run
            many = load_lessons(text, name)
        except SavedLessonError as error:
            errors.append(str(error))
            continue
        for saved in many:
            found[saved.lesson.key] = saved
    return found, errors


def saved_status_html(saved: SavedLesson, sentence: str = "") -> str:
    """What stands where a live run says "measured just now on this machine": the run is not live. sentence: the
    lesson's own, for the batch lesson, whose sentence is its status line (the Batch tab's)."""
    return render.status_html(f"Saved run, not measured here: {saved.label} ({saved.name})."
                              + (f" {sentence}" if sentence else ""), "saved")


def saved_summary_html(found: dict[str, SavedLesson], errors: list[str]) -> str:
    parts = [render.status_html(error, "error") for error in errors]
    if found:
        items = "".join(f"<li>{saved.lesson.number} · {html.escape(saved.lesson.title)}: "
                        f"{html.escape(saved.label)}</li>"
                        for saved in sorted(found.values(), key=lambda s: s.lesson.number))
        parts.append(f'<div class="sv-status sv-saved"><b>Saved runs shown, not live measurements:</b><ul>{items}</ul>'
                     f'</div>')
    return "".join(parts)
