"""Lesson 3, why checking K tokens costs about one step: the target's forward time against K new positions
(specviz.measure.cost_curve), beside the floor that reading every weight once sets (specviz.measure.floor)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..measure.cost_curve import CostPoint, latest_points, measure_positions
from ..measure.binding import what_binds
from ..measure.figures import GPU_VERIFY_RATIO
from ..measure.floor import memory_bandwidth, weight_bytes
from ..models.loading import LoadedModel
from ..measure.plausibility import cost_doubt, noise_note
from .common import PROMPTS, megabytes
from .lesson import Lesson

CLAIM = ("Where a forward is bound by reading the weights (a GPU at batch 1), checking K drafted tokens costs about "
         "as much as writing one: a forward reads every weight once, however many positions it scores. Where the "
         "arithmetic binds it (a small CPU), each checked position costs. The measurement below says which holds "
         "on this device.")
GPU_MEASUREMENT = (f"On a GPU the claim holds: on an H100 this lesson measured 16 positions at {GPU_VERIFY_RATIO:.2f}× "
                   "one (docs/performance.md, the lessons).")
BOUND_BY_WEIGHTS = 2.0  # a forward of one position within this many times the weight-read floor: the reads bind it
HEADERS = ["K (positions)", "forward ms", "× one position", "weight-read floor ms"]


@dataclass
class VerifyCost:
    device: str
    points: list[CostPoint]
    weight_bytes: int
    bandwidth_gbs: float
    bandwidth_source: str
    planned: int = 0  # forward widths the lesson measures (its progress: n of planned)

    @property
    def floor_ms(self) -> float:
        """The weights must be read once per forward: a forward cannot be faster than bytes / bandwidth."""
        return self.weight_bytes / (self.bandwidth_gbs * 1e9) * 1e3

    @property
    def implied_bandwidth_gbs(self) -> float | None:
        """The bandwidth the fastest measured forward implies if it read every weight once: where it is above the
        assumed figure, the assumption was too low (or part of the weights stayed in cache)."""
        fastest = min((p.ms for p in self.points), default=0.0)
        return self.weight_bytes / (fastest / 1e3) / 1e9 if fastest > 0 else None

    def ratio(self, k: int) -> float | None:
        """verify(K) / decode(1), the measured forward time of K positions over that of one."""
        by = {p.x: p.ms for p in self.points}
        return by[k] / by[1] if k in by and by.get(1) else None


POSITIONS = (1, 2, 3, 5, 8, 12, 16)  # K, the forward widths the lesson times


def verify_cost(target: LoadedModel, positions: Sequence[int] = POSITIONS, context: int = 128,
                repeats: int = 3, bandwidth: float | None = None) -> Iterator[VerifyCost]:
    """The target's forward time against K new positions (specviz.measure.cost_curve), beside the weight-read floor."""
    if bandwidth:
        gbs, source = bandwidth, "given"
    else:
        bytes_per_second, source = memory_bandwidth(target.device)
        gbs = bytes_per_second / 1e9
    record = VerifyCost(f"{target.device.type} ({target.describe()}, {str(target.dtype).replace('torch.', '')})", [],
                        weight_bytes(target.model), gbs, source, len(set(positions)))
    for point in measure_positions(target, positions, context=context, repeats=repeats):
        record.points = latest_points([*record.points, point])  # a point measured again replaces its first
        yield record


def verify_cost_rows(record: VerifyCost) -> list[list]:
    return [[p.x, round(p.ms, 2), "–" if record.ratio(p.x) is None else round(record.ratio(p.x), 2),
             round(record.floor_ms, 2)] for p in record.points]


def curve_sentence(points: list[CostPoint]) -> str:
    """What one curve of forward times measured, in words (lesson 3 and the Cost curve tab say the same): the
    widest forward against the narrowest, and what that says; with the noise note where a wider forward measured
    cheaper than a narrower (specviz.measure.plausibility), in place of a story it cannot support."""
    if len(points) < 2:
        return ""
    batch = points[0].axis == "batch"
    one, widest = min(points, key=lambda p: p.x), max(points, key=lambda p: p.x)
    k, ratio = widest.x, widest.ms / one.ms if one.ms > 0 else float("inf")
    what = f"a batch of {k}" if batch else f"{k} positions"
    single = f"one sequence's ({one.ms:.1f} ms)" if batch else f"one ({one.ms:.1f} ms)"
    text = (f"One forward of {what} took {widest.ms:.1f} ms, **{ratio:.2f}× the time of {single}**, where {k} "
            f"forwards of one {'sequence' if batch else 'position'} take {k * one.ms:.0f} ms. ")
    unit = "sequences" if batch else "positions"
    measured = [(p.x, p.ms) for p in points]
    doubt = cost_doubt(measured, unit, about=(one.x, widest.x))  # about the bold figure's own two points
    if doubt:
        return text + noise_note(doubt)
    elsewhere = cost_doubt(measured, unit)  # the figure passed; a pair of other points did not
    if elsewhere:
        text += (f"The bold figure's points passed their check; elsewhere on the chart, {elsewhere} (the machine "
                 "was busy there: run it again when it is quieter for a smooth curve). ")
    if not batch:  # the rule lesson 5 and the Batch tab read their verify pass by (specviz.measure.binding)
        binding = what_binds(ratio, k)
        grows = "The time barely grows with K" if binding.kind == "weights" else "The time grows with K"
        return f"{text}{grows}: {binding.sentence(say_ratio=False)} "
    if ratio < 2:
        return text + "The time barely grows with the batch: one read of the weights serves every sequence. "
    return text + "The time grows with the batch: the arithmetic fills the device, and extra positions cost. "


def verify_cost_sentence(record: VerifyCost | None) -> str:
    if record is None or len(record.points) < 2:
        return ""
    text = curve_sentence(record.points).rstrip()
    text += (f" The weights are {megabytes(record.weight_bytes)}: at {record.bandwidth_gbs:g} GB/s "
             f"({record.bandwidth_source}) no forward can beat {record.floor_ms:.1f} ms")
    implied = record.implied_bandwidth_gbs
    if implied and implied > record.bandwidth_gbs:
        text += (f"; the fastest one took {min(p.ms for p in record.points):.1f} ms, so this machine streams at "
                 f"least {implied:.0f} GB/s (or keeps part of the weights in cache): the assumption was too low")
    one = min(record.points, key=lambda p: p.x)
    if implied is None or implied <= record.bandwidth_gbs:
        over = one.ms / record.floor_ms if record.floor_ms > 0 else float("inf")
        text += (f"; one position took {one.ms:.1f} ms, {over:.1f}× that floor: "
                 + ("reading the weights sets a forward's time on this device"
                    if over <= BOUND_BY_WEIGHTS else "reading the weights is not what sets a forward's time on "
                    "this device"))
    text += "."
    widest = max(record.points, key=lambda p: p.x)
    if (record.device.startswith("cpu") and one.ms > 0 and widest.x > one.x
            and what_binds(widest.ms / one.ms, widest.x).kind != "weights"):
        text += " " + GPU_MEASUREMENT  # the claim failed here: where it holds, measured there
    return text


SETTINGS = dict(prompt=PROMPTS["code"], method="eagle", gamma=4, temperature=0.0, max_new=64, seed=0)
LESSON = Lesson(3, "cost", "Checking K costs about one", "Cost of K", CLAIM, verify_cost, lambda r: HEADERS,
                verify_cost_rows, verify_cost_sentence, VerifyCost, settings=SETTINGS)
