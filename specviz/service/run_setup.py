"""A run before it starts: its models from the pool, its prompt's token ids, its proposer and engine options
(RunSetup), and its one warm-up (prepare): on a GPU the graphs it will replay, captured before anything is timed."""
from __future__ import annotations

from dataclasses import dataclass

from ..api import encode, make_proposer, warm_up
from ..models.loading import LoadedModel
from ..options import EngineOptions
from ..proposers.checkpoints import load_draft_model
from ..runners.graphs import graph_span
from ..settings import DecodeSettings
from . import serving
from .engine_lock import ENGINE_LOCK
from .gpu import CAPTURE_SECONDS, forks
from .gpu_worker import Preparation, needs_preparing
from .gpu_worker import prepare as prepare_in_worker
from .public import check_prompt_tokens
from .run_request import RunRequest, engine_options


def load_models(request: RunRequest) -> tuple[LoadedModel, LoadedModel | None]:
    """The target and drafter from the process-wide registry (loaded on first use). Models that no run uses
    are unloaded first to make room (model_pool.py), so that switching models does not pile them up in memory.
    The warm-up is the run's own (prepare): it knows the run's draft length, tree and proposer."""
    pool, placement = serving.pool(), serving.placement()
    with pool.using(request.target, request.draft):
        target = serving.load_target(request.target)
        draft = (pool.load(request.draft, lambda: load_draft_model(request.draft, target,
                                                                   placement.draft_device or str(target.device)))
                 if request.draft else None)
    return target, draft


def encode_prompt(target: LoadedModel, prompt: str) -> list[int]:
    """A prompt's token ids, refused when the profile takes fewer tokens (its characters were checked at the
    boundary; tokens are known only once the target's tokenizer has read them)."""
    ids = encode(target, prompt)
    check_prompt_tokens(len(ids), serving.profile())
    return ids


def shape_key(target: LoadedModel, proposer, prompt_ids: list[int], settings: DecodeSettings, runs: int,
              options: EngineOptions) -> tuple:
    """What the graphs a run replays depend on besides the target: its proposer (and the models it drafts
    with), draft length, tree, attention span, greedy or sampled, how many runs at once, the engine's options."""
    drafters = tuple(id(getattr(runner, "model", None)) for runner in proposer.runners())
    return (proposer.name, drafters, settings.gamma, settings.tree, graph_span(prepared_length(target, prompt_ids,
            settings), target.context_length), settings.greedy, runs, options)


def prepared_length(target: LoadedModel, prompt_ids: list[int], settings: DecodeSettings) -> int:
    return min(len(prompt_ids) + settings.max_new_tokens + settings.tree + 1, target.context_length)


def prepare(target: LoadedModel, proposer, prompt_ids: list[int], settings: DecodeSettings,
            bound: float | None = None, runs: int = 1, options: EngineOptions | None = None) -> Preparation:
    """A run's one warm-up, untimed: a first short run of the model, and on a GPU the graphs this run will
    replay (its draft length, tree and proposer; for `runs` runs at once), captured before anything is timed,
    no capture starting past `bound` seconds (None: no bound). What it did: gpu_worker.Preparation (where it
    stopped, the run goes on with Preparation.options_for_run)."""
    options = options or EngineOptions.from_environment()
    length = prepared_length(target, prompt_ids, settings)
    key = shape_key(target, proposer, prompt_ids, settings, runs, options)
    with ENGINE_LOCK:
        return prepare_in_worker(target.model, key, lambda: warm_up(
            target, settings.gamma + 1, length, [proposer], tree=settings.tree, device_loop=settings.greedy,
            detail=True, options=options, runs=runs), bound)


@dataclass
class RunSetup:
    """What a run is made of before it starts (its proposer, prompt ids and engine options), and how it was
    prepared: made, then prepared (on ZeroGPU the page says so while that captures graphs), then run."""

    request: RunRequest
    target: LoadedModel
    draft: LoadedModel | None
    options: EngineOptions
    proposer: object
    prompt_ids: list[int]
    preparation: Preparation | None = None

    @classmethod
    def make(cls, request: RunRequest, target: LoadedModel, draft: LoadedModel | None) -> "RunSetup":
        options = engine_options(request)
        proposer = make_proposer(request.method, target, draft, options=options)
        return cls(request, target, draft, options, proposer, encode_prompt(target, request.prompt))

    @property
    def runs(self) -> int:
        """Runs that hold a target runner at once: the run, and its plain baseline beside it."""
        return 2 if self.request.compare_plain else 1

    def needs_preparing(self) -> bool:
        """Whether preparing captures graphs: the first run of its shapes in this process (a GPU worker's)."""
        return needs_preparing(self.target.model, shape_key(self.target, self.proposer, self.prompt_ids,
                                                            self.request.settings, self.runs, self.options))

    def prepare(self, bound: float | None = None) -> Preparation:
        """The run's warm-up (prepare), no capture starting past `bound` seconds; where it stopped, the run
        goes on without graphs, with a proposer made for that."""
        self.preparation = prepare(self.target, self.proposer, self.prompt_ids, self.request.settings, bound,
                                   self.runs, self.options)
        if self.preparation.eager:
            self.options = self.preparation.options_for_run(self.options)
            self.proposer = make_proposer(self.request.method, self.target, self.draft, options=self.options)
        return self.preparation


def capture_bound() -> float | None:
    """The seconds a run may spend capturing graphs: bounded inside a ZeroGPU call (its GPU is lent for
    gpu.DURATION), not on a GPU of the app's own."""
    return CAPTURE_SECONDS if forks() else None
