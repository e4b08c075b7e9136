"""Batched speculative decoding: B prompts at once, each step one verify pass over B x (gamma + 1) positions,
each row accepting its own number of drafts (a ragged batch: runners/batched.py keeps a length per row).

Every row has its own random generator and its own draft: the lookups (plain, `ngram`, `retrieval`) keep one
proposer a row on the host; a draft model (`draft`, `early-exit`) drafts for every row in one batched forward
a token (batch_draft.py). After one forward over every row, each row is judged, kept and observed by the same
step.py functions as a run of one row, so each row's output is its batch-1 output (greedy) or has its batch-1
distribution (sampling). A row that reaches its token limit or an end-of-sequence token leaves the batch, or, while
prompts wait, hands its slot to the next one (a refill queue: the batch stays full).

Plain decoding of a batch is the same loop with proposers that never draft, so a batch's speedup compares like
with like: the same runner, the same batch, the same prompts.

A batch of one row (one prompt, or batch_size=1) goes, unless asked otherwise (path="batched"), through the
single-sequence loop (engine.SpeculativeRun, one prompt after another), with the same proposer or draft model:
the same outputs, counted into the same BatchRun. That loop's runner captures CUDA graphs, which the batched
runner cannot (its shape changes as rows finish): on a GPU an eager step of a small model is bound by the host's
kernel launches, so batch 1 through the batched runner would be several times slower than the single-sequence
loop (docs/design.md, Batches, has the measurements). Drafters that read the target's hidden states (`medusa`,
`eagle`) and `adaptive` do not batch here."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from . import step
from .batch_draft import ModelDrafting, RowProposers
from ..runners.clock import device_clock
from .run import SpeculativeRun
from ..errors import InvalidSettingError
from ..models.loading import LoadedModel
from ..options import EngineOptions
from ..proposers import Draft, ModelDrafter, Proposer
from ..runners.batched import BatchedRunner, batched_runner, give_back
from ..rule import verify as verification
from ..rule.sampling import make_generator
from ..settings import DecodeSettings
from .step import Row
from .step_records import accepted_in_output

PATHS = ("auto", "batched", "single")  # decode_batch's: auto = single at one row, batched otherwise


@dataclass
class BatchRun:
    """What a batch's run produced: each row's output, and what the batch cost."""

    token_ids: list[list[int]]  # each row's new tokens, in the prompts' order
    forwards: int  # verify passes of the batch (each over every row still running)
    row_forwards: list[int]  # verify passes each row took part in
    drafted: int
    accepted: int
    wall_seconds: float
    prefill_seconds: float  # every prompt's prefill, refilled ones included
    stop_reasons: list[str] = field(default_factory=list)
    path: str = "batched"  # what decoded it: the batched runner, or the single-sequence loop ("single")
    width: int | None = None  # rows decoded at once (None: every prompt at once)

    @property
    def new_tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)

    @property
    def tokens_per_second(self) -> float:
        """The whole batch's new tokens over the run's time (prefill included)."""
        return self.new_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def ms_per_token(self) -> float:
        """What a sequence waits for each of its tokens: the decoding time over the tokens a row of the batch
        produced (with a refill queue a row decodes several prompts one after another)."""
        per_row = self.new_tokens / (self.width or max(1, len(self.token_ids)))
        return (self.wall_seconds - self.prefill_seconds) / max(per_row, 1e-9) * 1e3

    @property
    def mean_accepted_length(self) -> float:
        """tau: new tokens per verify pass a row took part in."""
        return self.new_tokens / max(1, sum(self.row_forwards))

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


@torch.inference_mode()
def decode_batch(target: LoadedModel, drafting: Callable[[], Proposer] | ModelDrafting, prompts: list[list[int]],
                 settings: DecodeSettings, batch_size: int | None = None, path: str = "auto",
                 options: EngineOptions | None = None, verifier: Callable | None = None) -> BatchRun:
    """Decode every prompt (token ids), batch_size rows at a time (None: all at once). drafting: a factory of
    one proposer a row (the lookups), or a draft model that drafts for the whole batch (api.batch_drafting
    picks).
    A finished row's slot takes the next prompt waiting, so the batch stays full while prompts wait. Prompt b's
    generator is seeded settings.seed + b, so that it samples as a batch-1 run of that seed does.
    path: "auto" decodes a batch of one row through the single-sequence loop (the module's docstring says
    why), "batched" always through the batched runner, "single" always one prompt after another. options:
    EngineOptions (None: read from the environment here, once for the whole batch). verifier: replaces
    verify_sampled, as SpeculativeRun's does (tests plant a wrong verifier with it)."""
    if path not in PATHS:
        raise InvalidSettingError(f"path is one of {', '.join(PATHS)}, got {path!r}")
    settings = settings.validate()
    options = options or EngineOptions.from_environment()
    if settings.tree:
        raise InvalidSettingError("batched decoding drafts chains; set tree to 0")
    if settings.draft_stop:
        raise InvalidSettingError("batched decoding drafts gamma tokens in every row; set draft-stop to 0")
    if not prompts or any(not ids for ids in prompts):
        raise InvalidSettingError("the prompt is empty; type some text")
    if batch_size is not None and batch_size < 1:
        raise InvalidSettingError(f"the batch size must be at least 1, got {batch_size}")
    capacity = max(len(ids) for ids in prompts) + settings.max_new_tokens + settings.gamma + 2
    if capacity > target.context_length:
        raise InvalidSettingError(f"the longest prompt and max-new-tokens {settings.max_new_tokens} go beyond the "
                                  f"model's context of {target.context_length}")
    eos_ids = target.eos_token_ids if settings.stop_at_eos else set()
    width = min(batch_size or len(prompts), len(prompts))
    if path == "single" or (path == "auto" and width == 1):
        return decode_one_at_a_time(target, drafting, prompts, settings, options, verifier)
    runner = batched_runner(target.model, width, capacity, options)
    drafters = (drafting.open(width, capacity, options) if isinstance(drafting, ModelDrafting)
                else RowProposers(drafting))
    try:
        return _decode_rows(target, runner, drafters, prompts, settings, width, eos_ids,
                            verifier or verification.verify_sampled)
    finally:  # pooled where it holds graphs, for the next call
        give_back(target.model, runner)
        drafters.release()


def _decode_rows(target, runner: BatchedRunner, drafters, prompts: list[list[int]], settings: DecodeSettings,
                 width: int, eos_ids, verify_sampled) -> "BatchRun":
    """The batch loop: each step drafts for every row, verifies all of them in one forward, then judges, keeps
    and observes row by row exactly as a run of one row does (step.py)."""
    device, context = target.device, target.context_length
    rows = [Row(list(ids), settings.max_new_tokens, eos_ids,
                make_generator(None if settings.seed is None else settings.seed + b, device))
            for b, ids in enumerate(prompts)]
    tensors = [torch.tensor(ids) for ids in prompts]  # each sequence as a tensor: made once a step

    def start(slot: int, prompt: int) -> None:
        lengths = list(runner.host_lengths)
        lengths[slot] = 0
        runner.rollback(lengths)
        ids = prompts[prompt]
        if len(ids) > 1:  # prompts differ in length: one row at a time
            runner.forward(torch.tensor(ids[:-1], dtype=torch.long)[None], "none", rows=slice(slot, slot + 1))
        drafters.start(slot, ids, tensors[prompt], settings, rows[prompt].generator)

    start_time = device_clock(device)
    for slot in range(width):
        start(slot, slot)
    prefill_seconds = device_clock(device) - start_time
    active = list(range(width))  # the runner's rows, in order: which prompt each holds
    waiting = list(range(width, len(prompts)))  # prompts not started yet, in order
    forwards, row_forwards, drafted, accepted = 0, [0] * len(prompts), 0, 0
    while active:
        step_start = time.perf_counter()
        # 1. draft: every row's, up to gamma tokens each
        gammas = [rows[p].draft_length(settings, context) for p in active]
        drafts = (drafters.propose([tensors[p] for p in active], gammas) if max(gammas) > 0
                  else [Draft(torch.empty(0, dtype=torch.long), None) for _ in active])
        draft_end = time.perf_counter()
        drafted_ids = [draft.token_ids.tolist() for draft in drafts]
        # 2. verify: one forward over every row's last accepted token and drafts; with graphs every step feeds
        # gamma + 1 positions (a graph a shape, not one for each shorter draft); the rest of a short row is
        # padding, written over later; one tensor made from host lists, one copy
        span = (settings.gamma if runner.padded_shapes else max(len(ids) for ids in drafted_ids)) + 1
        ids = torch.tensor([[rows[p].sequence[-1], *row_ids] + [0] * (span - 1 - len(row_ids))
                            for p, row_ids in zip(active, drafted_ids)], dtype=torch.long)
        lengths, finished = list(runner.host_lengths), []
        logits = runner.forward(ids)
        forwards += 1
        choices = logits.argmax(-1).tolist() if settings.greedy else None  # every row's in one transfer
        for i, (p, draft) in enumerate(zip(active, drafts)):  # then each row, as a run of one
            row, size = rows[p], draft.size
            verdict = step.judge(draft, drafted_ids[i], logits[i, :size + 1], settings, row.generator, verify_sampled,
                                 choices=None if choices is None else choices[i][:size + 1])
            # 3. keep
            kept = row.keep(drafted_ids[i][:verdict.n_accepted] + [verdict.next_token])
            tensors[p] = torch.tensor(row.sequence)
            lengths[i] += 1 + verdict.n_accepted  # the fed token and the accepted drafts
            row_forwards[p] += 1
            drafted += size
            accepted += accepted_in_output(verdict.n_accepted, kept)[0]
            # 4. observe
            drafters.observe(i, step.feedback(tensors[p], draft, verdict, kept, draft_end - step_start,
                                              time.perf_counter() - draft_end))
            if row.finished:
                finished.append(i)
        runner.rollback(lengths)
        leaving = []
        for i in finished:  # a finished row's slot takes the next prompt waiting, else the row leaves
            if waiting:
                active[i] = waiting.pop(0)
                prefill_start = device_clock(device)
                start(i, active[i])
                # a refilled prompt's prefill is prefill too: ms_per_token counts decoding time, as batch 1's loop
                prefill_seconds += device_clock(device) - prefill_start
            else:
                leaving.append(i)
        if leaving:  # finished rows stop costing
            still = [i for i in range(len(active)) if i not in leaving]
            runner.keep(still)
            drafters.keep(still)
            active = [active[i] for i in still]
    wall = device_clock(device) - start_time
    return BatchRun(token_ids=[row.output for row in rows], forwards=forwards, row_forwards=row_forwards,
                    drafted=drafted, accepted=accepted, wall_seconds=wall, prefill_seconds=prefill_seconds,
                    stop_reasons=[row.stop_reason for row in rows], width=width)


def single_proposer(drafting: Callable[[], Proposer] | ModelDrafting) -> Proposer:
    """The single-sequence loop's proposer for what a batch drafts with: the lookup's, or the draft model's."""
    return ModelDrafter(drafting.model, drafting.vocab_size) if isinstance(drafting, ModelDrafting) else drafting()


def decode_one_at_a_time(target: LoadedModel, drafting: Callable[[], Proposer] | ModelDrafting,
                         prompts: list[list[int]], settings: DecodeSettings,
                         options: EngineOptions | None = None, verifier: Callable | None = None) -> BatchRun:
    """decode_batch's prompts through the single-sequence loop, one after another (prompt b seeded seed + b),
    counted as a batch of one row: forwards are every run's verify passes, the wall time all of them."""
    runs = []
    start_time = device_clock(target.device)
    for b, ids in enumerate(prompts):
        proposer = single_proposer(drafting)
        seeded = settings if settings.seed is None else replace(settings, seed=settings.seed + b)
        run = SpeculativeRun(target, proposer, ids, seeded, detail=False, options=options, verifier=verifier)
        for _ in run:
            pass
        runs.append(run.result)
    wall = device_clock(target.device) - start_time
    return BatchRun(token_ids=[r.token_ids for r in runs], forwards=sum(r.metrics.target_forwards for r in runs),
                    row_forwards=[r.metrics.target_forwards for r in runs],
                    drafted=sum(r.metrics.drafted for r in runs), accepted=sum(r.metrics.accepted for r in runs),
                    wall_seconds=wall, prefill_seconds=sum(r.metrics.prefill_seconds for r in runs),
                    stop_reasons=[r.stop_reason for r in runs], path="single", width=1)


@torch.inference_mode()
def forward_cost(target: LoadedModel, batch_size: int, positions: int, context: int = 128, repeats: int = 3) -> float:
    """Milliseconds of one batched forward of `positions` new tokens for each of `batch_size` rows after a cache of
    `context` tokens (the median of `repeats`): what a verify pass of a batch costs against a plain step of it."""
    runner = BatchedRunner(target.model, batch_size, context + positions + 1)
    ids = torch.randint(0, target.vocab_size, (batch_size, positions))
    samples = []
    for repeat in range(repeats + 1):  # the first: untimed
        runner.rollback(torch.full((batch_size,), context))
        start = device_clock(target.device)
        runner.forward(ids)
        if repeat:
            samples.append((device_clock(target.device) - start) * 1e3)
    return sorted(samples)[len(samples) // 2]
