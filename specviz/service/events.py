"""What a computation served to the page tells as it goes: one frozen dataclass per kind of news. A GPU call
yields them (they pickle, so a forked ZeroGPU worker relays them); the web layer draws each by its type."""
from __future__ import annotations

from dataclasses import dataclass

from ..records.schema import RunResult, StepRecord
from ..settings import DecodeSettings


@dataclass(frozen=True)
class Failed:
    """The computation could not go on: a message for the page (what went wrong and what to do)."""
    message: str


@dataclass(frozen=True)
class Beat:
    """A unit of work done (a step, a batch, a model loaded): where a caller that went away stops it."""


# a run, and its plain baseline beside it (recorded_runs.run_records, calls.speculate_records)

@dataclass(frozen=True)
class Preparing:
    """The run captures its graphs first (the first run of its shapes on this worker)."""
    fresh_worker: bool  # the worker serves its first call


@dataclass(frozen=True)
class Started:
    """What a run computed elsewhere tells first: what the page's header and inspector need of its models."""
    tokenizer: object
    target_label: str
    device_label: str
    prompt_tokens: int
    speculative_settings: DecodeSettings
    plain_settings: DecodeSettings | None
    preparation: object | None = None  # gpu_worker.Preparation: what preparing did


@dataclass(frozen=True)
class Stepped:
    """One step of a run ("speculative" or "plain"), and the seconds it waited for the engine before it."""
    which: str
    step: StepRecord
    idle: float


@dataclass(frozen=True)
class Finished:
    """A run ("speculative" or "plain") at its end, and the seconds it waited for the engine in all."""
    which: str
    result: RunResult
    idle: float


@dataclass(frozen=True)
class Ended:
    """The run as a whole ended, in its phase (live.DONE, STOPPED or FAILED), with its error if it failed."""
    phase: str
    error: str | None


@dataclass(frozen=True)
class Report:
    """A run and its plain baseline as the API answers them (api.Report.to_dict)."""
    report: dict


# comparisons and measurements (the Compare, Cost curve and Batch tabs)

@dataclass(frozen=True)
class Progress:
    """A method's run has made `tokens` tokens so far."""
    method: str
    tokens: int


@dataclass(frozen=True)
class Skipped:
    """A method that could not run, and why (said on the page; the others go on)."""
    reason: str


@dataclass(frozen=True)
class Row:
    """One method's figures, measured beside plain decoding."""
    figures: dict


@dataclass(frozen=True)
class Device:
    """Where the measurement runs, in words."""
    label: str


@dataclass(frozen=True)
class Point:
    """One point of the cost curve (measure.cost_curve.CostPoint)."""
    point: object


@dataclass(frozen=True)
class BatchSize:
    """A batch size measured: the summary and the forward costs so far."""
    size: int
    summary: list
    costs: list


# lessons (calls.lesson_records)

@dataclass(frozen=True)
class LessonRecord:
    """A lesson's record so far (a table, histograms, a curve): the last one is the lesson's result."""
    record: object


Event = (Failed | Beat | Preparing | Started | Stepped | Finished | Ended | Report | Progress | Skipped | Row | Device
         | Point | BatchSize | LessonRecord)
