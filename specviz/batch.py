"""Batched speculative decoding: B prompts at once, each step one verify pass over B x (gamma + 1) positions,
each row accepting its own number of drafts (a ragged batch: runners/batched.py keeps a length per row).

Every row has its own proposer (its own n-gram index, its own datastore lookups) and its own random generator;
verification is the same per row as at batch 1 (verify.verify_greedy, verify.verify_sampled), so each row's
output is its batch-1 output (greedy) or has its batch-1 distribution (sampling). A row that reaches its token
limit or an end-of-sequence token leaves the batch: from then on it costs nothing.

Plain decoding of a batch is the same loop with proposers that never draft, so a batch's speedup compares like
with like: the same runner, the same batch, the same prompts. The drafters that batch are the lookups (plain,
`ngram`, `retrieval`): their drafting is per row on the host and costs next to nothing. Drafters that run a
model of their own (`draft`, `early-exit`, `medusa`, `eagle`) would need their own batched forward and do not
batch here."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from . import verify as verification
from .clock import device_clock
from .engine import keep_tokens
from .errors import InvalidSettingError
from .models import LoadedModel
from .proposers import Feedback, Proposer
from .runners.batched import BatchedRunner
from .sampling import make_generator, warp_probs
from .settings import DecodeSettings

BATCHED_METHODS = ("plain", "ngram", "retrieval")


@dataclass
class BatchRun:
    """What a batch's run produced: each row's output, and what the batch cost."""

    token_ids: list[list[int]]  # each row's new tokens, in the prompts' order
    forwards: int  # verify passes of the batch (each over every row still running)
    row_forwards: list[int]  # verify passes each row took part in
    drafted: int
    accepted: int
    wall_seconds: float
    prefill_seconds: float
    stop_reasons: list[str] = field(default_factory=list)

    @property
    def new_tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)

    @property
    def tokens_per_second(self) -> float:
        """The whole batch's new tokens over the run's time (prefill included)."""
        return self.new_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def ms_per_token(self) -> float:
        """What a sequence waits for each of its tokens: the decoding time over its mean number of tokens."""
        mean = self.new_tokens / max(1, len(self.token_ids))
        return (self.wall_seconds - self.prefill_seconds) / max(mean, 1e-9) * 1e3

    @property
    def mean_accepted_length(self) -> float:
        """tau: new tokens per verify pass a row took part in."""
        return self.new_tokens / max(1, sum(self.row_forwards))

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def check_batchable(method: str) -> None:
    if method not in BATCHED_METHODS:
        raise InvalidSettingError(f"{method} does not batch: batched decoding runs {', '.join(BATCHED_METHODS)} "
                                  "(a drafter that runs a model of its own would need its own batched forward)")


@torch.inference_mode()
def decode_batch(target: LoadedModel, make_proposer: Callable[[], Proposer], prompts: list[list[int]],
                 settings: DecodeSettings) -> BatchRun:
    """Decode every prompt (token ids) in one batch. Row b's generator is seeded settings.seed + b, so that a
    row samples as a batch-1 run of that seed does."""
    settings = settings.validate()
    if settings.tree:
        raise InvalidSettingError("batched decoding drafts chains; set tree to 0")
    if not prompts or any(not ids for ids in prompts):
        raise InvalidSettingError("the prompt is empty; type some text")
    device = target.device
    capacity = max(len(ids) for ids in prompts) + settings.max_new_tokens + settings.gamma + 2
    if capacity > target.context_length:
        raise InvalidSettingError(f"the longest prompt and max-new-tokens {settings.max_new_tokens} go beyond the "
                                  f"model's context of {target.context_length}")
    eos_ids = target.eos_token_ids if settings.stop_at_eos else set()
    runner = BatchedRunner(target.model, len(prompts), capacity)
    start = device_clock(device)
    for row, ids in enumerate(prompts):  # prompts differ in length: one row at a time
        if len(ids) > 1:
            runner.forward(torch.tensor(ids[:-1], dtype=torch.long)[None], "none", rows=slice(row, row + 1))
    sequences = [list(ids) for ids in prompts]
    outputs: list[list[int]] = [[] for _ in prompts]
    proposers = [make_proposer() for _ in prompts]
    generators = [make_generator(None if settings.seed is None else settings.seed + row, device)
                  for row in range(len(prompts))]
    for row, proposer in enumerate(proposers):
        proposer.reset(torch.tensor(sequences[row]), settings, generators[row])
    prefill_seconds = device_clock(device) - start
    active = list(range(len(prompts)))  # the runner's rows, in order: which prompt each holds
    forwards, row_forwards, drafted, accepted = 0, [0] * len(prompts), 0, 0
    stop_reasons = ["max_new_tokens"] * len(prompts)
    while active:
        step_start = time.perf_counter()
        drafts = [_draft(proposers[row], sequences[row], outputs[row], settings, target.context_length)
                  for row in active]
        draft_end = time.perf_counter()
        width = max(len(draft.token_ids) for draft in drafts) + 1
        ids = torch.zeros((len(active), width), dtype=torch.long)
        for i, (row, draft) in enumerate(zip(active, drafts)):
            ids[i, 0] = sequences[row][-1]
            ids[i, 1:1 + len(draft.token_ids)] = draft.token_ids  # the rest: padding, written over later
        cached = runner.lengths.clone()
        logits = runner.forward(ids)
        forwards += 1
        lengths, still = cached.clone(), []
        for i, (row, draft) in enumerate(zip(active, drafts)):
            size = len(draft.token_ids)
            row_logits = logits[i, :size + 1]
            if settings.greedy:
                verdict = verification.verify_greedy(draft.token_ids.cpu(), row_logits)
            else:
                verdict = verification.verify_sampled(draft.token_ids.to(device), draft.probs,
                                                      warp_probs(row_logits, settings), generators[row])
            n = verdict.n_accepted
            kept = keep_tokens(draft.token_ids[:n].tolist() + [verdict.next_token], outputs[row],
                               settings.max_new_tokens, eos_ids)
            sequences[row].extend(kept)
            lengths[i] += 1 + n  # the fed token and the accepted drafts
            row_forwards[row] += 1
            drafted += size
            accepted += min(n, len(kept))
            verify_end = time.perf_counter()
            proposers[row].observe(Feedback(tokens=torch.tensor(sequences[row]), drafted=size, n_accepted=n,
                                            draft_seconds=draft_end - step_start,
                                            verify_seconds=verify_end - draft_end, target_hidden=None,
                                            new_ids=kept))
            if kept and kept[-1] in eos_ids:
                stop_reasons[row] = "eos"
            elif len(outputs[row]) < settings.max_new_tokens:
                still.append(i)
        runner.rollback(lengths)
        if len(still) < len(active):  # finished rows leave the batch
            runner.keep(still)
            active = [active[i] for i in still]
    wall = device_clock(device) - start
    return BatchRun(token_ids=outputs, forwards=forwards, row_forwards=row_forwards, drafted=drafted,
                    accepted=accepted, wall_seconds=wall, prefill_seconds=prefill_seconds, stop_reasons=stop_reasons)


def _draft(proposer: Proposer, sequence: list[int], output: list[int], settings: DecodeSettings, context: int):
    room = min(settings.max_new_tokens - len(output) - 1, context - len(sequence) - 1)
    gamma = min(settings.gamma, room)
    if gamma <= 0:
        return proposer.empty_draft("cpu")
    return proposer.propose(torch.tensor(sequence), gamma)


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
