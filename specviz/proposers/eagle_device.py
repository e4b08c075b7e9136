"""`eagle`'s drafting on the device, for the device loop (device_loop.py): chains and EAGLE-2's dynamic trees as
tensor functions over the drafter's static cache (eagle_tree.py's), which a CUDA graph can hold.

The drafter's cache holds the positions computed from the target's own features. Each step first feeds the
positions the last verify pass kept (their features, handed over by observe() inside the verify graph), then
drafts from the last one's output: a chain token by token, a tree depth by depth (eagle_tree.draft_tree). The
drafted positions are scratch past the fed ones; the next step's feed overwrites them. Nothing here reads a
value back to the host; the drafts are EagleProposer's (tests compare them step by step).
"""
from __future__ import annotations

import torch

from ..runners.graphs import compiled_static
from ..rule.sampling import drafter_pick, exponential_noise
from ..rule.tree_device import tree_layout
from .base import DeviceLookup
from .eagle_tree import TreeDrafting, draft_tree, feed


class EagleSpace:
    """An EAGLE drafter's tensors for one loop state: its static cache (eagle_tree.TreeDrafting, whose catch-up
    graph feeds a prompt), the features of the positions still to feed [rows, F] and how many there are [1]."""

    def __init__(self, drafter, capacity: int, rows: int, options):
        self.trees = TreeDrafting(drafter, capacity, rows, options)
        parts = drafter.parts
        self.features = torch.zeros(rows, drafter.feature_size, device=parts.device, dtype=parts.dtype)
        self.count = torch.ones(1, dtype=torch.long, device=parts.device)


def pending_inputs(sequence, length, features, count):
    """The positions still to feed: (features [R, H], their next tokens x_{i+1} [R], how many are real [1],
    the first's slot [1]). They end at the sequence's last token but one: position i = length - 1 - count + r."""
    rows = features.shape[0]
    count = count.clamp(1, rows)
    start = length - 1 - count
    index = (start + 1 + torch.arange(rows, device=sequence.device)).clamp(0, sequence.shape[0] - 1)
    return features, sequence.index_select(0, index), count, start.clamp(min=0)


def draft_chain(drafter, cache, features, token_ids, count, start, gamma: int, span: int, warp=None, noise=None,
                shown: bool = False):
    """EagleProposer's chain, tensors only: feed the pending positions (rows past `count` are padding, written
    past the prefix and overwritten by the chain), then draft gamma tokens from the last real row's output, each
    fed back at the next slot. Greedy: the head's argmax. Sampled (warp: temperature, top-k, top-p as tensors
    and whether top-k or top-p apply; noise [gamma, K] Exp(1)): a draw from q, the warped head. Returns (tokens
    [gamma], q [gamma, V] or None; shown, greedy: the head's softmax, what the app shows of the drafter)."""
    head = drafter.head
    rows = features.shape[0]
    columns = torch.arange(span, device=features.device)
    slots = start + torch.arange(rows, device=features.device)
    out = feed(drafter, cache, features, token_ids, slots, slots, columns[None, :] <= slots[:, None])
    feature = out.index_select(0, count - 1)  # predicts the feature of the last token's position
    prefix = start + count
    tokens, qs = [], []
    for i in range(gamma):
        token, q, _ = drafter_pick(head.sub_logits(feature), head.token_ids, head.vocab_size, warp,
                                   None if noise is None else noise[i:i + 1], shown)  # from [1, K]
        if q is not None:
            qs.append(q)
        tokens.append(token)
        if i + 1 < gamma:
            slot = prefix + i
            feature = feed(drafter, cache, feature, token, slot, slot, columns[None, :] <= slot[:, None])
    return torch.cat(tokens), (torch.cat(qs) if qs else None)


def eagle_tree_nodes(drafter, cache, features, token_ids, count, start, gamma: int, width: int, budget: int,
                     span: int):
    """EagleProposer's tree (eagle_tree.draft_tree) laid out as the device loop's trees are (tree_layout)."""
    ids, parents = draft_tree(drafter, cache, features, token_ids, count, start, gamma, width, budget, span)
    return tree_layout(ids, parents, budget, gamma)


class EagleLookup(DeviceLookup):
    """EagleProposer's drafts on the device: a chain of gamma tokens, or a tree of `tree` nodes and depth gamma
    (width: nodes expanded a depth, children kept of each). captured: its graphs use gpu_attention's kernel (the
    drafter's cache tensors as eagle_tree captures them); compiled: through torch.compile."""

    has_q = True
    min_prompt = 2

    def __init__(self, drafter, gamma: int, tree: int, width: int, options, captured: bool = False,
                 compiled: bool = False):
        self.drafter, self.gamma, self.tree, self.width, self.options = drafter, gamma, tree, width, options
        self.captured = captured
        self.rows = gamma + 1  # what a step feeds: the last token's position and the accepted drafts'
        # slots written past the fed positions: the chain's, or the tree's depths (width nodes each)
        self.scratch = self.rows + (gamma - 1) * width if tree else self.rows + gamma
        self._chain = compiled_static(draft_chain) if compiled else draft_chain
        self._tree = compiled_static(eagle_tree_nodes) if compiled else eagle_tree_nodes

    def key(self) -> tuple:
        return ("eagle", id(self.drafter), self.gamma, self.tree, self.width)

    def workspace(self, device, capacity: int) -> EagleSpace:
        return EagleSpace(self.drafter, capacity, self.rows, self.options)

    def start(self, sequence, hidden) -> None:
        """The prompt's positions fed but the last, which the first step feeds (its output predicts the root)."""
        space = self.space
        space.trees.length = 0
        count = hidden.shape[0]
        if count > 1:
            space.trees.catch_up(hidden[:-1], sequence[1:count])
        space.features[:1].copy_(hidden[-1:])
        space.count.fill_(1)

    def _pending(self, sequence, length):
        return pending_inputs(sequence, length, self.space.features, self.space.count)

    def _span(self, span: int) -> int:
        """In graphs the whole cache (gpu_attention's kernel reads no slot past the last written, and one span
        is one compile of the drafting); eagerly the loop's."""
        return self.space.trees.capacity if self.captured else span

    def draft(self, sequence, length, span):
        tokens, _ = self._chain(self.drafter, self.space.trees.space.tensors(self.captured),
                                *self._pending(sequence, length), self.gamma, self._span(span))
        return tokens, torch.full((), self.gamma, dtype=torch.long, device=tokens.device)

    def draft_shown(self, sequence, length, span):
        tokens, shown = self._chain(self.drafter, self.space.trees.space.tensors(self.captured),
                                    *self._pending(sequence, length), self.gamma, self._span(span), shown=True)
        return tokens, torch.full((), self.gamma, dtype=torch.long, device=tokens.device), shown

    def sample(self, sequence, length, span, warp, generator):
        noise = exponential_noise((self.gamma, self.drafter.head.scored), generator, sequence.device)
        tokens, q = self._chain(self.drafter, self.space.trees.space.tensors(self.captured),
                                *self._pending(sequence, length), self.gamma, self._span(span),
                                (warp.temperature, warp.top_k, warp.top_p, warp.filtered), noise)
        return tokens, torch.full((), self.gamma, dtype=torch.long, device=tokens.device), q

    def draft_tree(self, sequence, length, span):
        return self._tree(self.drafter, self.space.trees.space.tensors(self.captured), *self._pending(sequence, length),
                          self.gamma, self.width, self.tree, self._span(span))

    def observe(self, hidden, rows, accepted) -> None:
        self.space.features.copy_(hidden.index_select(0, rows))
        self.space.count.copy_(accepted + 1)
