"""The drafting methods' names, apart from their code: the command line checks a --method before anything heavy
(torch, transformers) is imported, so a wrong argument is refused at once."""
from __future__ import annotations

import dataclasses

from .errors import InvalidSettingError
from .settings import DecodeSettings

METHODS = ("plain", "draft", "ngram", "retrieval", "early-exit", "medusa", "eagle", "adaptive")


def parse_method(spec: str, settings: DecodeSettings) -> tuple[str, DecodeSettings]:
    """'METHOD' or 'METHOD:GAMMA[:TREE][@STOP]' -> (the method, the settings it runs with), so that one bench
    can put, e.g., a chain and a tree of the same drafter side by side, or a draft model with and without
    its confidence stop (STOP: settings.draft_stop)."""
    head, _, stop = spec.partition("@")
    method, *numbers = head.split(":")
    if (method not in METHODS or len(numbers) > 2 or not all(n.isdigit() for n in numbers)
            or (stop and not stop.replace(".", "", 1).isdigit())):
        raise InvalidSettingError(f"bad method {spec!r}: write METHOD or METHOD:GAMMA[:TREE][@STOP] with METHOD one "
                                  f"of {', '.join(METHODS)}, e.g. ngram:8:64 or draft:4@0.5")
    if numbers:
        settings = dataclasses.replace(settings, gamma=int(numbers[0]), tree=int(numbers[1]) if len(numbers) > 1 else 0)
    if stop:
        settings = dataclasses.replace(settings, draft_stop=float(stop))
    return method, settings.validate()
