"""Whether a measured figure is one that the run's own figures allow: small pure functions, no clock, no UI.

On a shared machine (other users' runs, a browser drawing on the same cores) whatever runs at a given moment
is slowed, and a speedup is the ratio of two runs' times: a burst that lands on one run and not on the other
moves the figure, and nothing in it says so. These checks hold a figure against what the same measurement
shows elsewhere:

- a speculative step drafts and then checks gamma + 1 positions in one forward, so it costs at least one plain
  step plus its drafting, and speculation cannot be more than tau / (1 + gamma c) times faster than plain
  decoding, gamma c being the run's drafting time over its verifying time (the bound of Leviathan et al.'s
  formula with the verify pass taken as one plain step; checked with no tolerance: a figure just above it is as
  untrue as one far above it);
- steps of one kind do the same work: a run's time with each step taken at its kind's median duration is what
  it would have taken without bursts, and a speedup far from the one those medians give was moved by a burst;
- a forward over more positions (or more rows) does at least the work of one over fewer: measured cheaper, the
  narrower one was slowed by something else.

Each check returns None, or a sentence in plain words that says what does not add up (the app and the lessons
show it beside the figure, with a note that the machine was busy).
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

TOLERANCE = 0.15  # what timings of the same work differ by between repeats on a quiet shared machine


def typical_seconds(durations: Sequence[float], kinds: Sequence[int]) -> float:
    """A run's time with every step after the first taken at the median duration of its kind's steps (kind: the
    step's draft length; steps of one kind do the same work). The first step holds the prefill: as measured."""
    if not durations:
        return 0.0
    by_kind: dict[int, list[float]] = defaultdict(list)
    for duration, kind in zip(durations[1:], kinds[1:]):
        by_kind[kind].append(duration)
    medians = {kind: statistics.median(values) for kind, values in by_kind.items()}
    return durations[0] + sum(medians[kind] for kind in kinds[1:len(durations)])


def step_durations(elapsed: Sequence[float]) -> list[float]:
    """Each step's seconds, from the run's time at the end of every step."""
    return [b - a for a, b in zip([0.0, *elapsed], elapsed)]


def drafting_share(draft_seconds: float, verify_seconds: float) -> float:
    """gamma c of a run: its drafting time over its verifying time (c = one draft token's time over one verify
    pass's, times the drafts a step); 0 when nothing was timed."""
    return draft_seconds / verify_seconds if verify_seconds > 0 else 0.0


def speedup_ceiling(tau: float, drafting: float = 0.0) -> float:
    """The most a speculative run can beat plain decoding by: tau / (1 + gamma c), each step costing at least one
    plain step (its verify pass) and its drafting."""
    return tau / (1.0 + max(drafting, 0.0))


def speedup_doubt(speedup: float, tau: float, plain_durations: Sequence[float], spec_durations: Sequence[float],
                  spec_kinds: Sequence[int], tolerance: float = TOLERANCE, drafting: float = 0.0) -> str | None:
    """Why a measured speedup (plain time over speculative time) is not to be trusted, or None. tau: the
    speculative run's tokens per target forward; *_durations: each step's seconds (plain decoding's steps are
    all of one kind); spec_kinds: each speculative step's draft length; drafting: gamma c (drafting_share)."""
    ceiling = speedup_ceiling(tau, drafting)
    bound = (f"τ = {tau:.2f}" if drafting <= 0 else
             f"τ / (1 + γc) = {tau:.2f} / (1 + {drafting:.2f}) = {ceiling:.2f}")
    plain = typical_seconds(plain_durations, [0] * len(plain_durations))
    spec = typical_seconds(spec_durations, spec_kinds)
    typical = plain / spec if plain > 0 and spec > 0 else None
    if typical is not None and typical > ceiling * (1 + tolerance):
        return (f"a step of plain decoding took longer than a speculative step ({typical:.2f}× from the steps' "
                f"median times, more than {bound}): plain decoding ran while the machine was busier")
    if typical is not None and not 1 / (1 + tolerance) <= speedup / typical <= 1 + tolerance:
        return (f"with each kind of step taken at its median time the speedup is {typical:.2f}×, not "
                f"{speedup:.2f}×: some steps took far longer than others of their kind")
    if speedup > ceiling:  # no tolerance: a figure above the bound is never true, however close
        return (f"{speedup:.2f}× is more than {bound}, which no speculative run can beat: each of its steps "
                "costs at least one step of plain decoding and its drafting, so plain decoding was slowed while it "
                "was measured")
    return None


def cheaper_pairs(points: Sequence[tuple[int, float]], tolerance: float = TOLERANCE) -> list[tuple[int, int]]:
    """Every (narrow, wide) pair, by width, whose wide forward measured cheaper than its narrow one by more than
    the tolerance, cheapest against its narrow one first. points: (positions or rows, milliseconds)."""
    found = [(wide_ms / narrow_ms, (narrow, wide)) for narrow, narrow_ms in points for wide, wide_ms in points
             if wide > narrow and narrow_ms > 0 and wide_ms / narrow_ms < 1 - tolerance]
    return [pair for _, pair in sorted(found)]


def wider_cheaper(points: Sequence[tuple[int, float]], tolerance: float = TOLERANCE) -> tuple[int, int] | None:
    """The (narrow, wide) pair, by width, whose wide forward measured cheapest against its narrow one, where it
    measured cheaper by more than the tolerance; None when every wider forward cost at least about as much.
    points: (positions or rows, milliseconds)."""
    worst, pair = 1 - tolerance, None
    for narrow, narrow_ms in points:
        for wide, wide_ms in points:
            if wide > narrow and narrow_ms > 0 and wide_ms / narrow_ms < worst:
                worst, pair = wide_ms / narrow_ms, (narrow, wide)
    return pair


def cost_doubt(points: Sequence[tuple[int, float]], unit: str = "positions", tolerance: float = TOLERANCE,
               about: Sequence[int] | None = None) -> str | None:
    """Why a forward-time curve is not to be trusted, or None: a wider forward measured cheaper than a narrower.
    about: only pairs with one of these widths (the points a figure shown is made of); None: any pair."""
    pairs = [p for p in cheaper_pairs(points, tolerance) if about is None or set(p) & set(about)]
    if not pairs:
        return None
    pair = pairs[0]
    times = dict(points)
    narrow, wide = pair
    return (f"a forward of {wide} {unit} took {times[wide]:.1f} ms, less than one of {narrow} ({times[narrow]:.1f} "
            "ms), "
            "though it does more work: the narrower one was slowed while it was measured")


def batch_doubt(speedup: float, tau: float | None, verify_ratio: float | None, batch_size: int,
                tolerance: float = TOLERANCE) -> str | None:
    """Why one batch size's figures are not to be trusted, or None: a speedup above tau, or a verify pass of
    gamma + 1 positions a row measured cheaper than a plain step of one (verify_ratio: the first over the second).
    A figure that is None is not checked."""
    if tau is not None and speedup > tau * (1 + tolerance):
        return (f"at batch {batch_size}, {speedup:.2f}× is more than τ = {tau:.2f}, which no speculative run can "
                "beat: plain decoding was slowed while it was measured")
    if verify_ratio is not None and verify_ratio < 1 - tolerance:
        return (f"at batch {batch_size} a verify pass measured {verify_ratio:.2f}× a plain step, though it does "
                "more work: the plain step was slowed while it was measured")
    return None


def too_close_to_call(speedup: float, tolerance: float = TOLERANCE) -> bool:
    """A speedup within the tolerance of 1x: a repeat of the same measurement may land on the other side of 1, so
    a verdict that rests on it (pays, or stops paying) can flip between two runs on the same machine."""
    return 1 / (1 + tolerance) < speedup < 1 + tolerance


BUSY = "The machine was busy while this was measured, so the figure is noisy"
UNSETTLED = "Too close to call, so the verdict is noisy"


def noise_note(reason: str) -> str:
    """The note shown beside a figure that failed a check."""
    return f"{BUSY}: {reason}. Run it again when the machine is quieter."
