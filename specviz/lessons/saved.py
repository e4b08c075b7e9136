"""A lesson's run saved to one JSON file and read back: measure on one machine (a GPU with no browser), draw on
another. The file holds the lesson's record field by field, so that the record read back is the record the
lesson yielded and the Learn tab draws it with the same functions as a live run; beside it, where and when it
was measured (device, torch, dtype, model, date, commit) and the table and sentence the command line printed.

    python -m specviz learn all --device cuda --dtype bfloat16 --out runs/h100
    saved = load_lesson(Path("runs/h100/lesson-3-cost.json").read_text())
    saved.lesson.sentence(saved.record)
"""
from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import os
import platform
import subprocess
import types
import typing
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import SpecvizError
from ..models.loading import LoadedModel
from .catalogue import LESSONS, Lesson

FORMAT = "specviz-lesson"
MANY = "specviz-lessons"  # every lesson of one `learn --json` run in one file
VERSION = 1


class SavedLessonError(SpecvizError):
    """A file that is not a lesson saved by `python -m specviz learn --out`, or one this version cannot read."""


# values to JSON and back, led by the dataclasses' own annotations ----------------------------------------------

def encode(value):
    """Dataclasses as their fields (properties are recomputed when read back), enums as their value, dicts whose
    keys are not strings (token ids) as [key, value] pairs, so that JSON does not turn the keys into text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: encode(v) for k, v in value.items()}
        return [[encode(k), encode(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot save a {type(value).__name__}")


def decode(kind, value):
    """The inverse of encode, for a value of the annotated type `kind`."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):  # the first that fits: text, or token ids
            try:
                return decode(option, value)
            except (TypeError, ValueError) as error:
                errors.append(str(error))
        raise ValueError("; ".join(errors))
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise ValueError(f"{kind.__name__}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(kind)
        known = {f.name for f in dataclasses.fields(kind) if f.init}
        missing = [f.name for f in dataclasses.fields(kind)
                   if f.init and f.name not in value and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{kind.__name__}: missing {', '.join(missing)}")
        return kind(**{name: decode(hints[name], v) for name, v in value.items() if name in known})
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value)
    if kind is Counter or origin is Counter or kind is dict or origin is dict:
        key, item = args if len(args) == 2 else (typing.Any, typing.Any)
        pairs = value if isinstance(value, list) else list(value.items())
        out = {decode(key, k): decode(item, v) for k, v in pairs}
        return Counter(out) if kind is Counter or origin is Counter else out
    if kind is list or origin is list or origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {type(value).__name__}")
        item = args[0] if args else typing.Any
        return [decode(item, v) for v in value]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in (int, float, str, bool) and not isinstance(value, kind):
        raise ValueError(f"expected {kind.__name__}, got {value!r}")
    return value


# where and when ---------------------------------------------------------------------------------------------------

def device_name(device: torch.device) -> str:
    """The card's name on CUDA; the processor's model otherwise (Linux names it in /proc/cpuinfo)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or device.type


def git_commit() -> str | None:
    """The checkout's commit (with -dirty where files differ from it), or None outside a git checkout. A copy
    without its .git (a machine the tree was copied to) names it in SPECVIZ_COMMIT."""
    if os.environ.get("SPECVIZ_COMMIT"):
        return os.environ["SPECVIZ_COMMIT"]
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=10"], cwd=root, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def measured_on(target: LoadedModel, model: str) -> dict:
    """What a reader needs to tell this run from a live one and from another machine's."""
    return {"device": device_name(target.device), "device_type": target.device.type, "torch": torch.__version__,
            "dtype": str(target.dtype).replace("torch.", ""), "model": model, "model_loaded": target.describe(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(), "host": platform.node()}


# one file a lesson ----------------------------------------------------------------------------------------------

@dataclass
class SavedLesson:
    lesson: Lesson
    record: object  # as the lesson's generator yielded it last
    measured: dict  # measured_on's, and the lesson's seconds
    name: str = ""  # the file it came from

    @property
    def label(self) -> str:
        m = self.measured
        return (f"measured on {m.get('device') or 'an unknown device'}, {m.get('date') or 'date unknown'}, "
                f"{'commit ' + m['commit'] if m.get('commit') else 'commit unknown'}")


def lesson_json(lesson: Lesson, record, measured: dict, seconds: float | None = None) -> dict:
    return {"format": FORMAT, "version": VERSION, "lesson": lesson.number, "key": lesson.key, "title": lesson.title,
            "claim": lesson.claim, "measured": measured | {"seconds": seconds},
            "headers": lesson.headers(record), "rows": encode(lesson.rows(record)),
            "sentence": lesson.sentence(record), "sources": list(lesson.sources), "record": encode(record)}


def file_name(lesson: Lesson) -> str:
    return f"lesson-{lesson.number}-{lesson.key}.json"


def save_lesson(folder: str | Path, lesson: Lesson, record, measured: dict, seconds: float | None = None) -> Path:
    path = Path(folder) / file_name(lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(lesson_json(lesson, record, measured, seconds), ensure_ascii=False, indent=1) + "\n")
    return path


def lessons_json(entries: list[dict], target: str, device: str) -> dict:
    """Every lesson of one `learn --json FILE` run in one file (each entry a lesson_json): the Learn tab opens it
    as it opens the files of --out."""
    return {"format": MANY, "version": VERSION, "target": target, "device": device, "lessons": entries}


MEASURED_POSITIVE = {"wall_seconds", "ms", "ms_per_token", "ratio", "measured_speedup"}  # times and ratios a
# measurement gives: 0, a negative number or text there says the file was damaged (and would divide by zero)


def damage(value, where: str = "record") -> str | None:
    """Where a record (as saved) holds a measured time or ratio that is not a number above 0, and what it holds."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in MEASURED_POSITIVE and not (isinstance(item, (int, float)) and not isinstance(item, bool)
                                                 and math.isfinite(item) and item > 0):
                return f"{where}.{key} is {item!r}, where a measured time or ratio is a number above 0"
            found = damage(item, f"{where}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = damage(item, f"{where}[{i}]")
            if found:
                return found
    return None


def load_lesson(text: str | bytes, name: str = "the file") -> SavedLesson:
    """A saved lesson from its file's text; SavedLessonError, saying what is wrong, for anything else."""
    data = _json(text, name)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SavedLessonError(f"{name} is not a saved lesson: open a lesson-N-KEY.json that `specviz learn --out` "
                               "wrote, or the FILE of `specviz learn --json FILE`")
    return _lesson(data, name)


def load_lessons(text: str | bytes, name: str = "the file") -> list[SavedLesson]:
    """The lessons of a file: one (`learn --out`) or every lesson of a run (`learn --json`)."""
    try:
        return _load_lessons(text, name)
    except RecursionError:  # lists in lists in lists: json, or the reading of a record, ran out of stack
        raise SavedLessonError(
            f"{name} is nested too deeply to be a saved lesson (lists or objects inside each other "
            "thousands of levels down): open a file that `specviz learn --out` or --json wrote"
        ) from None


def _load_lessons(text: str | bytes, name: str) -> list[SavedLesson]:
    data = _json(text, name)
    if isinstance(data, dict) and data.get("format") == MANY:
        _version(data, name)
        entries = data.get("lessons")
        if not isinstance(entries, list) or not entries:
            raise SavedLessonError(f"{name} holds no lessons: its \"lessons\" list is missing or empty")
        return [_lesson(entry, f"{name} (lesson {i + 1} in it)") if isinstance(entry, dict)
                and entry.get("format") == FORMAT
                else _not_a_lesson(f"{name} (entry {i + 1} in it)") for i, entry in enumerate(entries)]
    return [load_lesson(text, name)]


def _json(text: str | bytes, name: str):
    try:
        return json.loads(text)
    except (UnicodeDecodeError, ValueError) as error:
        raise SavedLessonError(f"{name} is not JSON ({error}): open a file that `specviz learn --out` or --json "
                               "wrote") from None


def _not_a_lesson(name: str):
    raise SavedLessonError(f"{name} is not a saved lesson")


def _version(data: dict, name: str) -> None:
    if data.get("version") != VERSION:
        raise SavedLessonError(f"{name} is a saved lesson of version {data.get('version')!r}; this specviz reads "
                               f"version {VERSION}")


def _lesson(data: dict, name: str) -> SavedLesson:
    _version(data, name)
    lesson = next((item for item in LESSONS if item.key == data.get("key")), None)
    if lesson is None:
        raise SavedLessonError(f"{name}: no lesson {data.get('key')!r}")
    problem = damage(data.get("record"))
    if problem:
        raise SavedLessonError(f"{name}: lesson {lesson.number}'s record is damaged: {problem}")
    try:
        record = decode(lesson.record_type, data["record"])
        lesson.sentence(record)  # a record that decodes but cannot be drawn fails here, not in the tab
    except (KeyError, TypeError, ValueError, AttributeError, StopIteration, ZeroDivisionError) as error:
        raise SavedLessonError(f"{name}: lesson {lesson.number}'s record is incomplete or damaged ({error})") from None
    measured = data.get("measured") if isinstance(data.get("measured"), dict) else {}
    return SavedLesson(lesson, record, measured, name)
