"""What a lesson declares, in its own module: its number and titles, its claim, the settings it runs with, its
run, and how its record becomes a table and a sentence (pure functions of the record). The Learn tab, the command
line's `learn`, the endpoints and saved runs all read the declaration (catalogue.py collects them)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..models.loading import LoadedModel


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
    # what it runs with, which the Learn tab's "Open in the Run tab" copies there (prompt, method, gamma,
    # temperature, max_new, seed); None: nothing to open
    settings: dict | None = None
