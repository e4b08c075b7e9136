"""The lessons by number, as each lesson's module declares it (its LESSON: lesson.py's Lesson), so that the
command line, the Learn tab, the endpoints and saved runs read one declaration; register() adds one more."""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from ..errors import InvalidSettingError
from . import batch_size, bugs, drafters, exactness, forward_cost, speedup, steps
from .common import PROMPTS
from .lesson import Lesson

__all__ = ["LESSONS", "SETTINGS", "Lesson", "lesson_named", "lessons_to_run", "plain", "prompt_line", "register",
           "unregister"]

LESSONS: list[Lesson] = [module.LESSON for module in (steps, exactness, forward_cost, speedup, batch_size, drafters,
                                                       bugs)]


class _SettingsByKey(Mapping):
    """Each lesson's settings by its key, read from LESSONS as they stand (a lesson registered later included)."""

    def __getitem__(self, key: str) -> dict:
        found = next((lesson for lesson in LESSONS if lesson.key == key and lesson.settings is not None), None)
        if found is None:
            raise KeyError(key)
        return found.settings

    def __iter__(self):
        return (lesson.key for lesson in LESSONS if lesson.settings is not None)

    def __len__(self) -> int:
        return sum(lesson.settings is not None for lesson in LESSONS)


# what each lesson runs with, by key; the Learn tab's "Open in the Run tab" copies them there
SETTINGS: Mapping[str, dict] = _SettingsByKey()


def register(lesson: Lesson) -> Lesson:
    """Adds a lesson (a test's or a plugin's) after the others: the Learn tab built after it, `learn` and the saved
    runs find it. Its number and key must be new."""
    if not isinstance(lesson, Lesson):
        raise InvalidSettingError(f"register takes a specviz.lessons.Lesson, got {type(lesson).__name__}")
    taken = [other for other in LESSONS if other.number == lesson.number or other.key == lesson.key]
    if taken:
        raise InvalidSettingError(f"lesson {taken[0].number} ({taken[0].key!r}) has that number or key already")
    LESSONS.append(lesson)
    LESSONS.sort(key=lambda other: other.number)
    return lesson


def unregister(key: str) -> None:
    """Takes a registered lesson out again (a test's, when it ends)."""
    LESSONS[:] = [lesson for lesson in LESSONS if lesson.key != key]


def _quoted(prompt: str) -> str:
    return "“" + prompt + "”"


def prompt_line(lesson: Lesson) -> str:
    """What the lesson asks the model, as the Learn tab and the command line show it beside the claim: the text,
    and that it is sent as a chat turn (the model's template around it), as every lesson sends it."""
    if lesson.key == "cost":
        return "Prompt: none; each forward runs over a context of 128 tokens already in the cache."
    if lesson.key in ("acceptance", "batch"):
        return ("Prompts, each sent as a chat turn: " + "; ".join(f"{kind}: {_quoted(text)}" for kind, text in
                                                                   PROMPTS.items()) + ".")
    prompt = (lesson.settings or {}).get("prompt")
    return f"Prompt, sent as a chat turn: {_quoted(prompt)}." if prompt else ""


LONGEST_NAME = 40  # a lesson's number or key as a caller writes it; longer is not a lesson's name


def lesson_named(which) -> Lesson:
    """The lesson of that number ("3") or key ("cost"), as a caller (an endpoint, a notebook) names it; anything
    else is refused with the names there are."""
    names = ", ".join(f"{lesson.number} ({lesson.key})" for lesson in LESSONS)
    if not isinstance(which, str) or not which.strip() or len(which) > LONGEST_NAME:
        raise InvalidSettingError(f"lesson is a lesson's number or key as text, one of {names}")
    found = _found(which.strip())
    if found is None:
        raise InvalidSettingError(f"no lesson {which.strip()!r}: choose one of {names}")
    return found


def _found(name: str) -> Lesson | None:
    """The lesson whose number or key is `name`, or None."""
    return next((lesson for lesson in LESSONS if name in (str(lesson.number), lesson.key)), None)


def lessons_to_run(which: str) -> list[Lesson]:
    """'all' or a lesson's number."""
    if which == "all":
        return list(LESSONS)
    chosen = _found(str(which).strip())
    if chosen is None:
        raise InvalidSettingError(f"no lesson {which!r}: choose 1 to {len(LESSONS)}, or all")
    return [chosen]


def plain(value):
    """A record as JSON-ready values: dataclasses and dicts walked, a record's own to_dict() used where it has one."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        props = {name: getattr(value, name) for name, attr in vars(type(value)).items() if isinstance(attr, property)}
        return out | {name: plain(v) for name, v in props.items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
