"""The draft model's drafting on the device (`draft`, and `early-exit`'s cut of the target), for the device loop
(device_loop.py): its forwards over a static cache of its own (the fast path's decode), which a CUDA graph can
hold, with the draft stop as a condition on the device.

Its cache holds the accepted sequence up to the last token but two, and whatever the last step drafted past
it. A step feeds the sequence's last two tokens at their positions (the one before the last is usually in
the cache already, as an accepted draft or the last token of the step before: writing it again writes the same
keys and values), which gives the logits of the first draft, then feeds each draft token back. A chain with a
draft stop still computes gamma tokens (a graph has one shape) but ends, for the verifier, after the first
token the drafter gave less than the stop's probability, as ModelDrafter ends it. Nothing here reads a value back
to the host.
"""
from __future__ import annotations

import torch

from ..runners.static import StaticRunner
from ..rule.sampling import drafter_pick, exponential_noise
from .base import DeviceLookup


def fitted(logits: torch.Tensor, vocab_size: int, token_ids: torch.Tensor | None) -> torch.Tensor:
    """The drafter's logits over what it may draft: its draft vocabulary's scores (token_ids), or its output
    layer's rows cut to the target's vocabulary (draft_model.fit_vocabulary: a larger padded layer's extra ids
    are never drafted; a smaller one's missing ids have probability 0)."""
    return logits if token_ids is not None else logits[..., :vocab_size]


def draft_model_chain(runner, sequence, length, span: int, gamma: int, vocab_size: int, token_ids,
                      draft_stop: float, warp=None, noise=None, shown: bool = False):
    """ModelDrafter's chain, tensors only: (tokens [gamma], its length [] (cut after the first doubted token),
    q [gamma, V] or None). Greedy: the drafter's argmax; sampled (warp as eagle_device.draft_chain's, noise
    [gamma, K] Exp(1)): a draw from its warped distribution. shown, greedy: q is the drafter's softmax, what the
    app shows of it."""
    device = sequence.device
    first = (length - 2).clamp(min=0)
    ids = sequence.index_select(0, first + torch.arange(2, device=device))
    logits, _ = runner.decode(ids, first, span, True, float_logits=False)
    tokens, qs, doubts = [], [], []
    for i in range(gamma):
        scores = fitted(logits.float(), vocab_size, token_ids)  # [1, K]
        token, q, index = drafter_pick(scores, token_ids, vocab_size, warp, None if noise is None else noise[i:i + 1],
                                       shown)
        if q is not None:
            qs.append(q)
        if draft_stop > 0:  # draft_model.doubts: the drafter's own probability, before any sampling warp
            doubts.append(scores.softmax(-1).gather(1, index[:, None])[:, 0] < draft_stop)
        tokens.append(token)
        if i + 1 < gamma:
            logits, _ = runner.decode(token, length + i, span, True, float_logits=False)
    chain = torch.cat(tokens)
    size = torch.full((), gamma, dtype=torch.long, device=device)
    if draft_stop > 0:  # ends after the first doubted token
        doubted = torch.cat(doubts)
        size = torch.where(doubted.any(), doubted.int().argmax() + 1, size)
    return chain, size, (torch.cat(qs) if qs else None)


class DraftModelSpace:
    """The drafter's own fast-path runner (its static cache), made once per loop state with the switches of the
    runner it stands beside (`like`): the loop's graphs point at its cache."""

    def __init__(self, like: StaticRunner, capacity: int):
        self.runner = StaticRunner(like.model, graphs=like.use_graphs, compile=like.use_compile, onednn=like.use_onednn,
                                   triton_attention=like.use_triton_attention, exact=False)
        self.runner.ensure_capacity(capacity)
        self.runner.warm_up(1, capacity)  # a prompt's prefill graphs, captured before anything is timed


class DraftModelLookup(DeviceLookup):
    """ModelDrafter's chains on the device. runner: the drafter's own (its model and switches); token_ids: the
    draft vocabulary a distilled model scores (None: its output layer's rows are the target's ids); draft_stop:
    settings.draft_stop."""

    has_q = True
    min_prompt = 2

    def __init__(self, runner: StaticRunner, vocab_size: int, token_ids, gamma: int, draft_stop: float):
        self.like, self.model, self.vocab_size, self.token_ids = runner, runner.model, vocab_size, token_ids
        self.gamma, self.draft_stop = gamma, draft_stop
        self.stops = draft_stop > 0
        self.scratch = gamma + 1  # the chain's positions past the sequence
        rows = self.model.get_output_embeddings().weight.shape[0]
        self.scored = token_ids.shape[0] if token_ids is not None else min(rows, vocab_size)  # what it may draft

    def key(self) -> tuple:
        return ("draft", id(self.model), self.gamma, self.draft_stop)

    def workspace(self, device, capacity: int) -> DraftModelSpace:
        return DraftModelSpace(self.like, capacity)

    def start(self, sequence, hidden) -> None:
        """The prompt but its last token into the drafter's cache (its own prefill)."""
        runner = self.space.runner
        runner.reset()
        runner.forward(sequence[:-1], logits_for="none")
        runner.reset()  # the loop's steps write by position; the runner's own length is not used

    def draft(self, sequence, length, span):
        tokens, size, _ = draft_model_chain(self.space.runner, sequence, length, span, self.gamma, self.vocab_size,
                                            self.token_ids, self.draft_stop)
        return tokens, size

    def draft_shown(self, sequence, length, span):
        return draft_model_chain(self.space.runner, sequence, length, span, self.gamma, self.vocab_size,
                                 self.token_ids, self.draft_stop, shown=True)

    def sample(self, sequence, length, span, warp, generator):
        noise = exponential_noise((self.gamma, self.scored), generator, sequence.device)
        return draft_model_chain(self.space.runner, sequence, length, span, self.gamma, self.vocab_size,
                                 self.token_ids, self.draft_stop,
                                 (warp.temperature, warp.top_k, warp.top_p, warp.filtered), noise)
