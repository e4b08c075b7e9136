"""The drafting methods' names and the bench's argument syntax (METHOD:GAMMA[:TREE][@STOP], batch sizes), apart
from their code: the command line checks them before anything heavy (torch, transformers) is imported, so a
wrong argument is refused at once."""
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


def parse_batch_sizes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]: `bench --batch-sizes` and the Batch tab's sizes, sorted, each once."""
    sizes = [part.strip() for part in text.split(",") if part.strip()]
    if not sizes or not all(size.isdigit() and int(size) >= 1 for size in sizes):
        raise InvalidSettingError(f"--batch-sizes takes whole numbers >= 1, comma-separated (1,2,4,8), got {text!r}")
    return sorted({int(size) for size in sizes})
