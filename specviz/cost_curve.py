"""The target's forward time on the running hardware, measured two ways:

- against K, the number of new positions fed in one forward (batch 1): verifying gamma drafts feeds
  K = gamma + 1 positions. On a GPU at batch 1 the time hardly grows with K (the weights are read once
  either way), which is why verification is nearly free; on a CPU it grows with K.
- against batch size B (one new position per sequence): when batching already fills the device, the extra
  positions speculation adds are no longer free, and speculation stops paying.

The K curve is specviz.runners.static.cost_curve, one K at a time (so that the app can show progress and let other
users' steps in between); the batch curve runs transformers' own forward, as any batched server would, with
every cache call through specviz.runner (batch.forward_cost times the batch loop's runner instead, for the Batch
tab and lesson 5). No UI imports (this runs on the GPU machine too).
"""
from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from .clock import device_clock
from .runners.static import cost_curve as fast_cost_curve
from .runners.static import make_runner
from .models import LoadedModel
from .runner import _cache_keyword, drop_last, input_device, new_cache

POSITIONS = tuple(range(1, 17))
BATCH_SIZES = (1, 2, 4, 8, 16, 32)


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


def measure_positions(target: LoadedModel, positions: Sequence[int] = POSITIONS, context: int = 128,
                      repeats: int = 3) -> Iterator[CostPoint]:
    """One forward of K new positions after a cache of `context` tokens, one K at a time, through the runner
    the engine uses (specviz.runners.static.cost_curve: graphs and compile where the engine has them)."""
    runner = make_runner(target.model)
    try:
        for k in positions:
            ms = fast_cost_curve(target.model, [k], context=context, repeats=repeats, runner=runner)[k]
            yield CostPoint("positions", k, ms, context)
    finally:
        runner.release()  # the static runner's cache goes back to the model's pool


@torch.inference_mode()
def measure_batch(target: LoadedModel, batch_sizes: Sequence[int] = BATCH_SIZES, context: int = 64,
                  repeats: int = 3) -> Iterator[CostPoint]:
    """Time one forward of one new position for each of B sequences that each have `context` cached tokens."""
    model = target.model
    device = input_device(model)
    keyword = _cache_keyword(model)
    for b in batch_sizes:
        cache = new_cache()
        ids = _random_ids(target, (b, context + 1), seed=b).to(device)
        model(input_ids=ids[:, :context], use_cache=True, **{keyword: cache})
        positions = torch.full((b, 1), context, device=device)
        times = []
        for _ in range(repeats + 1):  # the first one untimed
            start = device_clock(device)
            model(input_ids=ids[:, context:], position_ids=positions, use_cache=True, **{keyword: cache})
            times.append((device_clock(device) - start) * 1e3)
            drop_last(cache, 1)
        del cache
        yield CostPoint("batch", b, statistics.median(times[1:]), context)


def measure_cost_curve(target: LoadedModel, positions: Sequence[int] = POSITIONS,
                       batch_sizes: Sequence[int] = BATCH_SIZES, repeats: int = 3) -> Iterator[CostPoint]:
    """Both curves, one point at a time (so that a caller can show progress and stop between points)."""
    yield from measure_positions(target, positions, repeats=repeats)
    yield from measure_batch(target, batch_sizes, repeats=repeats)
