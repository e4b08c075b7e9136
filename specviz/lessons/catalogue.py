"""The lessons by number: each one's title, claim, the settings it runs with, and how its record becomes a
table and a sentence, so that the command line and the Learn tab say the same."""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import InvalidSettingError
from ..models.loading import LoadedModel
from . import batch_size, bugs, drafters, exactness, forward_cost, speedup, steps
from .common import PROMPTS
from .literature import SPEC_BENCH_SOURCE, literature_lines, spec_bench_lines

SETTINGS = {  # what each lesson runs with; the Learn tab's "Open in the Run tab" copies them there
    # a prompt the 135M default model answers with sense (on caches it wrote of hidden valuables)
    "mechanic": dict(prompt="Give two tips for sleeping well.", method="eagle", gamma=4, temperature=0.0,
                     max_new=24, seed=0),
    "exact": dict(prompt="Once upon a time, there was a", method="medusa", gamma=1, temperature=0.7, max_new=32,
                  seed=0),
    "cost": dict(prompt=PROMPTS["code"], method="eagle", gamma=4, temperature=0.0, max_new=64, seed=0),
    "acceptance": dict(prompt=PROMPTS["code"], method="ngram", gamma=4, temperature=0.0, max_new=32, seed=0),
    "drafters": dict(prompt=PROMPTS["code"], method="eagle", gamma=4, temperature=0.0, max_new=32, seed=0),
    # the first new token after a chat prompt, drafted by EAGLE at gamma 1 (lesson 7 tests that token)
    "bugs": dict(prompt=bugs.PROMPT, method=bugs.METHOD, gamma=1, temperature=bugs.TEMPERATURE, max_new=32, seed=0),
}
EXACT_RUNS = 150  # seeds per histogram in lesson 2


@dataclass(frozen=True)
class Lesson:
    number: int
    key: str
    title: str
    short: str  # the title where room is short: the Learn tab's bar holds every lesson's in a row
    claim: str
    run: Callable[[LoadedModel], Iterator]  # the lesson's generator on a loaded target
    headers: Callable[[object], list[str]]  # of a record, or of None: the table's before the lesson has run
    rows: Callable[[object], list[list]]
    sentence: Callable[[object], str]  # markdown: the measured figure in **bold**
    record_type: object  # what `run` yields (a dataclass, or a list of one): a saved run is read back as it
    sources: tuple[str, ...] = ()  # what the lesson quotes rather than measures, one line each
    minutes: int = 1  # how long it takes on a quiet 2-core CPU, rounded up: 1 is under a minute


def _mechanic(target: LoadedModel) -> Iterator:
    s = SETTINGS["mechanic"]
    return steps.mechanic(target, s["prompt"], s["method"], s["gamma"], s["max_new"])


def _unchanged(target: LoadedModel) -> Iterator:
    s = SETTINGS["exact"]
    return exactness.unchanged(target, s["prompt"], s["method"], EXACT_RUNS, s["temperature"], s["max_new"])


def _unchanged_rows(record: exactness.Unchanged) -> list[list]:
    return [] if record.sampled is None else exactness.distribution_rows(record.sampled)


def _unchanged_headers(record: exactness.Unchanged | None) -> list[str]:
    return [] if record is None or record.sampled is None else exactness.distribution_headers(record.sampled)


def _batch_sentence(record: batch_size.BatchSizes) -> str:
    return batch_size.batch_sentence(record.summary, record.method, record.costs)


LESSONS = [
    Lesson(1, "mechanic", "The mechanic", "Mechanic", steps.CLAIM, _mechanic, lambda r: steps.HEADERS,
           steps.mechanic_rows, steps.mechanic_sentence, steps.Mechanic),
    Lesson(2, "exact", "The output does not change", "Same output", exactness.CLAIM, _unchanged, _unchanged_headers,
           _unchanged_rows, exactness.unchanged_sentence, exactness.Unchanged),
    Lesson(3, "cost", "Checking K costs about one", "Cost of K", forward_cost.CLAIM, forward_cost.verify_cost,
           lambda r: forward_cost.HEADERS, forward_cost.verify_cost_rows, forward_cost.verify_cost_sentence,
           forward_cost.VerifyCost),
    Lesson(4, "acceptance", "Acceptance decides the win", "Acceptance", speedup.CLAIM, speedup.acceptance,
           lambda r: speedup.HEADERS, speedup.acceptance_rows, speedup.acceptance_sentence, list[speedup.AcceptanceRow],
           tuple([*literature_lines(), f"Spec-Bench's leaderboard beside specviz: {SPEC_BENCH_SOURCE}",
                  *spec_bench_lines()])),
    Lesson(5, "batch", "Where it stops paying: batch size", "Batch size", batch_size.CLAIM, batch_size.batch_sizes,
           lambda r: batch_size.HEADERS, batch_size.batch_rows, _batch_sentence, batch_size.BatchSizes),
    Lesson(6, "drafters", "What each drafter costs", "Drafters", drafters.CLAIM, drafters.drafter_costs,
           lambda r: drafters.HEADERS, drafters.drafter_rows, drafters.drafter_sentence, list[drafters.DrafterCost]),
    Lesson(7, "bugs", "How speculative decoding goes wrong", "Bugs", bugs.CLAIM, bugs.bugs, lambda r: bugs.HEADERS,
           bugs.bug_rows, bugs.bug_sentence, bugs.Bugs, minutes=2),
]


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
    prompt = SETTINGS.get(lesson.key, {}).get("prompt")  # a lesson registered later may have no settings here
    return f"Prompt, sent as a chat turn: {_quoted(prompt)}." if prompt else ""


def lessons_to_run(which: str) -> list[Lesson]:
    """'all' or a lesson's number."""
    if which == "all":
        return list(LESSONS)
    chosen = [lesson for lesson in LESSONS if str(lesson.number) == str(which).strip()]
    if not chosen:
        raise InvalidSettingError(f"no lesson {which!r}: choose 1 to {len(LESSONS)}, or all")
    return chosen


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
