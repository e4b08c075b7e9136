"""A run's records as they come (StepLog), and a SpeculativeRun advanced one step at a time under the engine lock
(SteppedRun). Each run counts the time it spent suspended between steps (waiting for the lock, or paused in step
mode), so that its speeds are given on engine time: equal to the engine's own wall time when nobody else was
running and nothing was paused."""
from __future__ import annotations

import dataclasses
import time

from ..engine.run import SpeculativeRun
from ..measure.plausibility import step_durations
from ..records.metrics import summarize
from ..records.schema import RunResult, StepRecord
from ..settings import DecodeSettings
from .engine_lock import ENGINE_LOCK


def _is_last(step: StepRecord, run: SpeculativeRun) -> bool:
    """Whether the engine's loop ends after this step (its two exits: max-new-tokens and EOS)."""
    if step.total_emitted >= run.settings.max_new_tokens:
        return True
    emitted = step.emitted_tokens
    return bool(run.settings.stop_at_eos and emitted and emitted[-1].id in run.target.eos_token_ids)


class StepLog:
    """A run's records as they come: its steps, the engine time it spent suspended before each, its result.
    What the app draws reads only this (a run driven here, or one computed in a forked GPU call)."""

    def __init__(self, method: str, settings: DecodeSettings):
        self.method = method
        self.settings = settings  # the engine's (its tree is 0 where the method or runner drafts chains)
        self.steps: list[StepRecord] = []
        self.idle_before: list[float] = []  # idle seconds accumulated up to each step
        self.idle_seconds = 0.0  # time the engine spent suspended between steps
        self.result: RunResult | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def closed(self) -> bool:
        return True

    def engine_elapsed(self, index: int) -> float:
        """Seconds of engine time from the start of the run to the end of step `index`."""
        return self.steps[index].elapsed_s - self.idle_before[index]

    @property
    def emitted(self) -> int:
        """Output tokens so far."""
        return self.steps[-1].total_emitted if self.steps else 0

    @property
    def durations(self) -> list[float]:
        """Each step's seconds of engine time (the first one's include the prefill)."""
        return step_durations([self.engine_elapsed(i) for i in range(len(self.steps))])

    @property
    def engine_wall(self) -> float | None:
        if self.result is None:
            return None
        return max(self.result.metrics.wall_seconds - self.idle_seconds, 1e-9)

    @property
    def engine_tokens_per_second(self) -> float | None:
        wall = self.engine_wall
        return None if wall is None else self.result.metrics.new_tokens / wall


def engine_result(log: StepLog) -> RunResult:
    """A finished run's result with its times on engine time: each step's elapsed time and the run's wall time
    without the time it spent suspended while other users' steps ran (its speeds then are its own)."""
    result = log.result
    steps = [dataclasses.replace(step, elapsed_s=log.engine_elapsed(i)) for i, step in enumerate(log.steps)]
    metrics = summarize(steps, result.metrics.new_tokens, log.engine_wall, result.metrics.prefill_seconds)
    return dataclasses.replace(result, steps=steps, metrics=metrics)


class SteppedRun(StepLog):
    """A SpeculativeRun advanced one step at a time under ENGINE_LOCK."""

    def __init__(self, run: SpeculativeRun):
        super().__init__(run.proposer.name, run.settings)
        self.run: SpeculativeRun | None = run
        self._iterator = iter(run)
        self._suspended_at: float | None = None

    @property
    def closed(self) -> bool:
        return self.run is None

    def advance(self) -> StepRecord | None:
        """Run one step (the first one includes the prefill). None once the run has ended."""
        if self.run is None:
            return None
        with ENGINE_LOCK:
            now = time.perf_counter()
            if self._suspended_at is not None:
                self.idle_seconds += now - self._suspended_at
            try:
                step = next(self._iterator)
                if _is_last(step, self.run):  # let the engine finish now, so that `result` is set with the step
                    next(self._iterator, None)
            except StopIteration:
                step = None
            self._suspended_at = time.perf_counter()
        if step is not None:
            self.steps.append(step)
            self.idle_before.append(self.idle_seconds)
        if self.run.result is not None:
            self.result = self.run.result
            self.close()
        return step

    def close(self) -> None:
        """Drop the engine objects (KV caches, proposer state); the steps and the result stay."""
        if self.run is not None:
            self._iterator.close()
            self.run = None
            self._iterator = None
