"""Lesson 3, why checking K tokens costs about one step: the target's forward time against K new positions
(specviz.cost_curve), beside the floor that reading every weight once sets (specviz.floor)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..cost_curve import CostPoint, measure_positions
from ..floor import memory_bandwidth, weight_bytes
from ..models import LoadedModel
from .common import megabytes

CLAIM = ("Checking K drafted tokens costs about as much as writing one: a forward reads every weight once, however "
         "many positions it scores.")
HEADERS = ["K (positions)", "forward ms", "× one position", "weight-read floor ms"]


@dataclass
class VerifyCost:
    device: str
    points: list[CostPoint]
    weight_bytes: int
    bandwidth_gbs: float
    bandwidth_source: str

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


def verify_cost(target: LoadedModel, positions: Sequence[int] = (1, 2, 3, 5, 8, 12, 16), context: int = 128,
                repeats: int = 3, bandwidth: float | None = None) -> Iterator[VerifyCost]:
    """The target's forward time against K new positions (specviz.cost_curve), beside the weight-read floor."""
    if bandwidth:
        gbs, source = bandwidth, "given"
    else:
        bytes_per_second, source = memory_bandwidth(target.device)
        gbs = bytes_per_second / 1e9
    record = VerifyCost(f"{target.device.type} ({target.describe()}, {str(target.dtype).replace('torch.', '')})", [],
                        weight_bytes(target.model), gbs, source)
    for point in measure_positions(target, positions, context=context, repeats=repeats):
        record.points.append(point)
        yield record


def verify_cost_rows(record: VerifyCost) -> list[list]:
    return [[p.x, round(p.ms, 2), "–" if record.ratio(p.x) is None else round(record.ratio(p.x), 2),
             round(record.floor_ms, 2)] for p in record.points]


def verify_cost_sentence(record: VerifyCost | None) -> str:
    if record is None or len(record.points) < 2:
        return ""
    k = max(p.x for p in record.points)
    ratio = record.ratio(k)
    one, many = record.points[0].ms, record.points[0].ms * ratio
    text = (f"One forward of {k} positions took {many:.1f} ms, **{ratio:.2f}× the time of one** ({one:.1f} ms), "
            f"where {k} forwards of one position take {k * one:.0f} ms. ")
    if ratio < 2:
        text += "The time barely grows with K: reading the weights, not the arithmetic, dominates a forward. "
    else:
        text += "The time grows with K: here the arithmetic, not the weight reads, dominates a forward, so each checked draft costs. "
    text += (f"The weights are {megabytes(record.weight_bytes)}: at {record.bandwidth_gbs:g} GB/s "
             f"({record.bandwidth_source}) no forward can beat {record.floor_ms:.1f} ms")
    implied = record.implied_bandwidth_gbs
    if implied and implied > record.bandwidth_gbs:
        text += (f"; the fastest one took {min(p.ms for p in record.points):.1f} ms, so this machine streams at "
                 f"least {implied:.0f} GB/s (or keeps part of the weights in cache): the assumption was too low")
    return text + "."
