"""How far a lesson's record has come: "n of N" in the lesson's own unit, from the record alone, so that the
Learn tab and the command line can say it while a lesson runs; and the time left at the pace so far."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import bugs, exactness, forward_cost, speedup, steps


@dataclass(frozen=True)
class Progress:
    done: int
    total: int | None  # None: not known from the record (the count alone is shown)
    unit: str  # plural noun: "seeds", "runs"...
    detail: str = ""  # what the count is made of, in a few words

    @property
    def finished(self) -> bool:
        return self.total is not None and self.done >= self.total

    def __str__(self) -> str:
        count = (
            f"{self.done} of {self.total} {self.unit}" if self.total is not None else f"{self.done} {self.unit} so far"
        )
        return count + (f" ({self.detail})" if self.detail else "")


def progress_of(record) -> Progress | None:
    """The record's progress, or None where it has no count yet (a lesson's first, untimed part)."""
    if isinstance(record, steps.Mechanic):
        return Progress(len(record.steps), len(record.steps) if record.result is not None else None, "steps")
    if isinstance(record, exactness.Unchanged):
        return None if record.sampled is None else progress_of(record.sampled)
    if isinstance(record, exactness.SideBySide):
        return None
    if isinstance(record, exactness.Distribution):
        arms = [h for h in (record.plain, record.speculative, record.wrong) if h is not None]
        names = ", ".join(h.label if h.label in ("plain", "wrong verifier") else f"with {h.label}" for h in arms)
        return Progress(sum(h.runs for h in arms), record.runs * len(arms), "runs",
                        f"{record.runs} seeds each: {names}")
    if isinstance(record, forward_cost.VerifyCost):
        return Progress(len(record.points), record.planned or None, "forward widths")
    if isinstance(record, bugs.Bugs):
        if record.seeds <= record.runs:
            return Progress(record.seeds, record.runs, "seeds", "every verifier on each")
        return Progress(record.seeds, None, "seeds", f"past {record.runs}, until every wrong verifier is caught")
    if isinstance(record, list) and record and isinstance(record[0], speedup.AcceptanceRow):
        return Progress(len(record), len(speedup.compared()) * len(speedup.PROMPTS), "method runs",
                        "each method on each prompt")
    if isinstance(record, list):
        return Progress(len(record), None, "rows")
    return None


def time_left(samples: Sequence[tuple[float, int]], total: int | None, window: float = 30.0) -> float | None:
    """Seconds left at the pace of the last `window` seconds (at least the last two samples): samples are
    (seconds, done) in order. None until the pace is known, or without a total."""
    if total is None or len(samples) < 2:
        return None
    now, done = samples[-1]
    first = next((s for s in samples if s[0] >= now - window), samples[-2])
    if first is samples[-1]:
        first = samples[-2]
    rate = (done - first[1]) / (now - first[0]) if now > first[0] else 0.0
    return None if rate <= 0 else max(0.0, (total - done) / rate)


def left_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 90:
        return f"about {max(5, round(seconds / 5) * 5):.0f} s left"
    return f"about {round(seconds / 60):.0f} min left"
