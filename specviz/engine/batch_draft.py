"""Drafting for a batch (batch.py): what proposes each row's draft. Lookups (plain, `ngram`, `retrieval`) keep
one proposer a row, on the host (RowProposers). A draft model (`draft`, `early-exit`) runs over every row at
once with a batched runner of its own (BatchedModelDrafter): a step first catches each row's cache up with its
accepted sequence, then takes gamma one-token forwards of the whole batch.

Catching up is ragged: after a verification a row that rejected a draft feeds the token that replaced it (one
token), a row that accepted every draft feeds its last draft and the bonus token (two), a row that has just
started feeds its prompt's last token. The batch feeds the longest count, shorter rows padded on the right; a
row's logits are read at its own last real token, and each row then rolls back to its own length, so the
padding is written over later (a padded slot comes after the row's real tokens: nothing real attends to it).

Each row draws from q with its own generator, in the order a batch-1 run draws (only the drafts it keeps), so
a row's random stream is its batch-1 run's."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..proposers import Draft, Feedback, Proposer
from ..proposers.draft_model import common_prefix_length, to_target_vocabulary
from ..options import EngineOptions
from ..runners.batched import batched_runner, give_back
from ..rule.sampling import draw, warp_probs
from ..settings import DecodeSettings


class RowProposers:
    """One proposer a row, made by make_proposer: the lookups, whose drafting costs next to nothing per row."""

    def __init__(self, make_proposer: Callable[[], Proposer]):
        self.make_proposer = make_proposer
        self.rows: list[Proposer] = []

    def start(self, row: int, prompt: list[int], sequence: torch.Tensor, settings: DecodeSettings,
              generator: torch.Generator) -> None:
        """Row `row` (a new row at the end, or a finished row's slot) begins decoding `prompt`."""
        proposer = self.make_proposer()
        proposer.reset(sequence, settings, generator)
        if row == len(self.rows):
            self.rows.append(proposer)
        else:
            self.rows[row] = proposer

    def propose(self, sequences: list[torch.Tensor], gammas: list[int]) -> list[Draft]:
        return [proposer.propose(sequence, gamma) if gamma > 0 else proposer.empty_draft("cpu")
                for proposer, sequence, gamma in zip(self.rows, sequences, gammas)]

    def observe(self, row: int, feedback: Feedback) -> None:
        self.rows[row].observe(feedback)

    def keep(self, rows: list[int]) -> None:
        self.rows = [self.rows[row] for row in rows]

    def release(self) -> None:
        for proposer in self.rows:
            proposer.release()


def ragged_ids(pieces: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row token lists of different lengths -> (ids [B, K] right-padded with 0, counts [B])."""
    width = max(len(piece) for piece in pieces)
    ids = torch.zeros((len(pieces), width), dtype=torch.long)
    for row, piece in enumerate(pieces):
        ids[row, :len(piece)] = torch.tensor(piece, dtype=torch.long)
    return ids, torch.tensor([len(piece) for piece in pieces], dtype=torch.long)


def choose_rows(logits: torch.Tensor, settings: DecodeSettings, generators: list[torch.Generator],
                drawing: list[bool]) -> tuple[list[int], torch.Tensor]:
    """logits [B, V] -> (a token per row, q [B, V]): the argmax when greedy, else a draw from each row's q
    with that row's generator; rows not `drawing` draw nothing (their token: 0), so their streams stay put."""
    probs = warp_probs(logits, settings)
    if settings.greedy:
        return logits.argmax(-1).tolist(), probs
    return [int(draw(probs[row], generators[row])) if drawing[row] else 0 for row in range(len(drawing))], probs


@dataclass(frozen=True)
class ModelDrafting:
    """What a batch drafts with when it drafts with a model: the model (a separate drafter, or the target's
    early-exit cut) and the target's vocabulary size (q must cover p's ids)."""

    model: torch.nn.Module
    vocab_size: int

    def open(self, batch: int, capacity: int, options: EngineOptions | None = None) -> BatchedModelDrafter:
        return BatchedModelDrafter(self.model, self.vocab_size, batch, capacity, options)


class BatchedModelDrafter:
    """A draft model's drafting for every row of a batch at once, its cache a prefix of each row's accepted
    sequence between steps. Rows as in RowProposers: start, propose, observe, keep."""

    def __init__(self, model: torch.nn.Module, vocab_size: int, batch: int, capacity: int,
                 options: EngineOptions | None = None):
        self.model = model
        self.runner = batched_runner(model, batch, capacity, options)
        self.vocab_size = vocab_size
        self.token_ids = getattr(model, "draft_vocab", None)  # a distilled draft model's draft vocabulary
        self.cached: list[list[int]] = []  # each row's tokens whose keys and values are in the runner's cache
        self.generators: list[torch.Generator] = []
        self.settings: DecodeSettings | None = None

    def start(self, row: int, prompt: list[int], sequence: torch.Tensor, settings: DecodeSettings,
              generator: torch.Generator) -> None:
        self.settings = settings
        lengths = list(self.runner.host_lengths)
        lengths[row] = 0
        self.runner.rollback(lengths)
        if len(prompt) > 1:  # the prompt but its last token: the first step feeds that one for its logits
            self.runner.forward(torch.tensor(prompt[:-1], dtype=torch.long)[None], "none", rows=slice(row, row + 1))
        if row == len(self.cached):
            self.cached.append(prompt[:-1])
            self.generators.append(generator)
        else:
            self.cached[row], self.generators[row] = prompt[:-1], generator

    def _catch_up(self, sequences: list[list[int]]) -> torch.Tensor:
        """Feed each row what its cache lacks of its sequence (at least the last token) -> logits [B, V] after
        each row's last token."""
        keeps = [min(common_prefix_length(cached, sequence), len(sequence) - 1)
                 for cached, sequence in zip(self.cached, sequences)]
        self.runner.rollback(keeps)
        ids, counts = ragged_ids([sequence[keep:] for sequence, keep in zip(sequences, keeps)])
        if self.runner.padded_shapes and ids.shape[1] < self.settings.gamma + 1:  # one shape for the graphs
            ids = torch.nn.functional.pad(ids, (0, self.settings.gamma + 1 - ids.shape[1]))
        logits = self.runner.forward(ids)
        self.runner.rollback([keep + count for keep, count in zip(keeps, counts.tolist())])
        self.cached = [list(sequence) for sequence in sequences]
        last = logits[torch.arange(len(sequences)), (counts - 1).to(logits.device)]
        return to_target_vocabulary(last, self.token_ids, self.vocab_size)

    def propose(self, sequences: list[torch.Tensor], gammas: list[int]) -> list[Draft]:
        logits = self._catch_up([sequence.tolist() for sequence in sequences])
        longest = max(gammas)
        tokens: list[list[int]] = [[] for _ in gammas]
        probs: list[list[torch.Tensor]] = [[] for _ in gammas]
        raw: list[list[torch.Tensor]] = [[] for _ in gammas]
        for step in range(longest):
            drawing = [step < gamma for gamma in gammas]
            chosen, q = choose_rows(logits, self.settings, self.generators, drawing)
            for row, draws in enumerate(drawing):
                if draws:
                    tokens[row].append(chosen[row])
                    probs[row].append(q[row])
                    raw[row].append(logits[row])
            if step + 1 < longest:
                fed = list(self.runner.host_lengths)
                forward = self.runner.forward(torch.tensor(chosen, dtype=torch.long)[:, None])
                logits = to_target_vocabulary(forward[:, -1], self.token_ids, self.vocab_size)
                for row, draws in enumerate(drawing):
                    if draws:  # the draft's keys and values are right: a later step keeps them if accepted
                        self.cached[row].append(chosen[row])
                        fed[row] += 1
                self.runner.rollback(fed)
        return [Draft(torch.tensor(tokens[row], dtype=torch.long), torch.stack(probs[row]), torch.stack(raw[row]))
                if tokens[row] else Draft(torch.empty(0, dtype=torch.long), None) for row in range(len(gammas))]

    def observe(self, row: int, feedback: Feedback) -> None:
        """Nothing to do now: the next step keeps the cache's prefix that the accepted sequence shares."""

    def release(self) -> None:
        give_back(self.model, self.runner)

    def keep(self, rows: list[int]) -> None:
        self.runner.keep(rows)
        self.cached = [self.cached[row] for row in rows]
        self.generators = [self.generators[row] for row in rows]
