"""The target's forward time on the running hardware, measured two ways:

- against K, the number of new positions fed in one forward (batch 1): verifying gamma drafts feeds
  K = gamma + 1 positions. On a GPU at batch 1 the time hardly grows with K (the weights are read once
  either way), which is why verification is nearly free; on a CPU it grows with K.
- against batch size B (one new position per sequence): when batching already fills the device, the extra
  positions speculation adds are no longer free, and speculation stops paying.

The K curve is specviz.runners.static.cost_curve, one K at a time (so that the app can show progress and let other
users' steps in between); the batch curve runs transformers' own forward, as any batched server would, with
every cache call through specviz.runners.causal (batch.forward_cost times the batch loop's runner instead, for the Batch
tab and lesson 5). No UI imports (this runs on the GPU machine too).

On a shared machine a busy moment can slow one point: a wider forward then measures cheaper than a narrower one,
which it cannot be (specviz.measure.plausibility.wider_cheaper). Both points of such a pair are measured again, up to
RECHECKS times, each keeping the lower of its times (a busy machine only adds time); a point measured again is
yielded again, and a caller keeps the last point of each width.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from ..runners.clock import device_clock
from ..runners.static import cost_curve as fast_cost_curve
from ..runners.static import make_runner
from ..models.loading import LoadedModel
from .plausibility import wider_cheaper
from ..models.loading import input_device
from ..runners.causal import _cache_keyword, drop_last, new_cache, repeat_rows

POSITIONS = tuple(range(1, 17))
BATCH_SIZES = (1, 2, 4, 8, 16, 32)
RECHECKS = 2  # times the points of an implausible pair are measured again


@dataclass
class CostPoint:
    axis: str  # "positions" (K new positions, batch 1) or "batch" (B sequences, one new position each)
    x: int  # K or B
    ms: float  # median forward time in milliseconds
    context: int  # tokens already in the cache


def _random_ids(target: LoadedModel, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    # forward time does not depend on which tokens are fed; random ids avoid needing a tokenizer
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, target.vocab_size, shape, generator=generator)


def _rechecked(measure: Callable[[int], float], widths: Sequence[int]) -> Iterator[tuple[int, float]]:
    """(width, ms) for each width, then again for each point measured again: the pair whose wider forward
    measured cheaper than its narrower, both again, up to RECHECKS times, each keeping its lower time."""
    times = {}
    for width in widths:
        times[width] = measure(width)
        yield width, times[width]
    for _ in range(RECHECKS):
        pair = wider_cheaper(list(times.items()))
        if pair is None:
            return
        for width in pair:
            times[width] = min(times[width], measure(width))
            yield width, times[width]


def measure_positions(target: LoadedModel, positions: Sequence[int] = POSITIONS, context: int = 128,
                      repeats: int = 3) -> Iterator[CostPoint]:
    """One forward of K new positions after a cache of `context` tokens, one K at a time, through the runner
    the engine uses (specviz.runners.static.cost_curve: graphs and compile where the engine has them); a K
    measured again (the module's doc) comes again."""
    runner = make_runner(target.model)
    try:
        def measure(k: int) -> float:
            return fast_cost_curve(target.model, [k], context=context, repeats=repeats, runner=runner)[k]

        for k, ms in _rechecked(measure, positions):
            yield CostPoint("positions", k, ms, context)
    finally:
        runner.release()  # the static runner's cache goes back to the model's pool


@torch.inference_mode()
def _batch_ms(target: LoadedModel, b: int, context: int, repeats: int) -> float:
    """The median time of one forward of one new position for each of b sequences of `context` cached tokens."""
    model = target.model
    device = input_device(model)
    keyword = _cache_keyword(model)
    cache = new_cache()
    ids = _random_ids(target, (b, context + 1), seed=b).to(device)
    # one row prefilled, its cache copied to the b rows: the timed forward's cost is the same whatever the cached
    # tokens, and a prefill of b rows costs b times one (most of a batch point's time on a CPU)
    model(input_ids=ids[:1, :context], use_cache=True, **{keyword: cache})
    repeat_rows(cache, b)
    positions = torch.full((b, 1), context, device=device)
    times = []
    for _ in range(repeats + 1):  # the first one untimed
        start = device_clock(device)
        model(input_ids=ids[:, context:], position_ids=positions, use_cache=True, **{keyword: cache})
        times.append((device_clock(device) - start) * 1e3)
        drop_last(cache, 1)
    del cache
    return statistics.median(times[1:])


def measure_batch(target: LoadedModel, batch_sizes: Sequence[int] = BATCH_SIZES, context: int = 64,
                  repeats: int = 3) -> Iterator[CostPoint]:
    """Time one forward of one new position for each of B sequences that each have `context` cached tokens; a B
    measured again comes again."""
    for b, ms in _rechecked(lambda b: _batch_ms(target, b, context, repeats), batch_sizes):
        yield CostPoint("batch", b, ms, context)


def measure_cost_curve(target: LoadedModel, positions: Sequence[int] = POSITIONS,
                       batch_sizes: Sequence[int] = BATCH_SIZES, repeats: int = 3,
                       as_measured: bool = False) -> Iterator[CostPoint]:
    """Both curves. as_measured: one point at a time as it is measured, a point measured again coming again (for a
    caller that shows progress and stops between points; latest_points keeps the last of each); else every point
    once, with its final figure."""
    curves = (measure_positions(target, positions, repeats=repeats),
              measure_batch(target, batch_sizes, repeats=repeats))
    for curve in curves:
        yield from curve if as_measured else latest_points(list(curve))


def latest_points(points: Sequence[CostPoint]) -> list[CostPoint]:
    """The last point of each axis and width, in the order they first came."""
    latest = {}
    for point in points:
        latest[(point.axis, point.x)] = point
    return list(latest.values())
