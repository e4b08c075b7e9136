"""`dflash`'s drafting on the device, for the device loop (device_loop.py): a block a step as tensor functions over
the drafter's cache, which a CUDA graph can hold.

Each step first feeds the context positions the last verify pass kept (their features, handed over by observe()
inside the verify graph; rows past their count are padding, written at the block's slots and overwritten by the
block), then runs the block's one forward and drafts from it: a chain (greedy, or each position drawn from its q),
or DDTree's tree. Nothing here reads a value back to the host; the drafts are DFlashProposer's (tests compare them).
"""
from __future__ import annotations

import torch

from ..runners.graphs import compiled_static
from ..rule.sampling import drafter_pick, exponential_noise
from ..rule.tree_device import tree_layout
from .base import DeviceLookup
from .dflash_net import block_tree, draft_block, feed_context


class DFlashSpace:
    """A drafter's tensors for one loop state: its cache, the features of the positions still to feed [rows, F]
    and how many there are [1]."""

    def __init__(self, drafter, capacity: int, rows: int):
        self.cache = drafter.new_cache(capacity)
        features = len(drafter.config.target_layer_ids) * drafter.config.hidden_size
        self.features = torch.zeros(rows, features, device=drafter.device, dtype=drafter.dtype)
        self.count = torch.zeros(1, dtype=torch.long, device=drafter.device)


def block_outputs(drafter, cache, sequence, length, features, count, gamma: int, span: int):
    """Feed the pending positions (they end at the sequence's last token but one), then run the block after them:
    its outputs at the gamma drafted positions [gamma, H]."""
    rows = features.shape[0]
    last = (length - 1).clamp(min=0)  # clamped: a graph is captured over a loop state that holds no sequence yet
    start = (last - count).clamp(min=0)
    feed_context(drafter, cache, features, start + torch.arange(rows, device=features.device))
    return draft_block(drafter, cache, sequence.index_select(0, last), last, span)[1:gamma + 1]


def dflash_chain(drafter, cache, sequence, length, features, count, gamma: int, span: int, warp=None, noise=None,
                 shown: bool = False):
    """DFlashProposer's chain, tensors only: (tokens [gamma], q [gamma, V] or None), as drafter_pick gives them."""
    hidden = block_outputs(drafter, cache, sequence, length, features, count, gamma, span)
    head = drafter.head
    tokens, q, _ = drafter_pick(head.sub_logits(hidden), head.token_ids, head.vocab_size, warp, noise, shown)
    return tokens, q


def dflash_tree(drafter, cache, sequence, length, features, count, gamma: int, budget: int, span: int):
    """DFlashProposer's tree, laid out as the device loop's trees are (tree_layout)."""
    hidden = block_outputs(drafter, cache, sequence, length, features, count, gamma, span)
    ids, parents = block_tree(drafter, hidden, budget)
    return tree_layout(ids, parents, budget, gamma)


class DFlashLookup(DeviceLookup):
    """DFlashProposer's drafts on the device: a chain of gamma tokens (at most the block's size less one), or a
    tree of `tree` nodes and depth gamma. compiled: through torch.compile."""

    has_q = True
    min_prompt = 2  # a block needs a context: at least one position before the last token

    def __init__(self, drafter, gamma: int, tree: int, compiled: bool = False):
        self.drafter, self.tree = drafter, tree
        self.gamma = min(gamma, drafter.config.block_size - 1)
        self.rows = self.gamma + 1  # what a step feeds: the last token's position and the accepted drafts'
        self.scratch = drafter.config.block_size  # the block's slots, written past the sequence's last token
        self._chain = compiled_static(dflash_chain) if compiled else dflash_chain
        self._tree = compiled_static(dflash_tree) if compiled else dflash_tree

    def key(self) -> tuple:
        return ("dflash", id(self.drafter), self.gamma, self.tree)

    def workspace(self, device, capacity: int) -> DFlashSpace:
        return DFlashSpace(self.drafter, capacity, self.rows)

    def start(self, sequence, hidden) -> None:
        """The prompt's positions but the last fed at once (their features: the prefill's)."""
        space = self.space
        count = hidden.shape[0]
        feed_context(self.drafter, space.cache, hidden, torch.arange(count, device=hidden.device))
        space.count.zero_()

    def _inputs(self, sequence, length):
        return self.space.cache, sequence, length, self.space.features, self.space.count

    def draft(self, sequence, length, span):
        tokens, _ = self._chain(self.drafter, *self._inputs(sequence, length), self.gamma, span)
        return tokens, torch.full((), self.gamma, dtype=torch.long, device=tokens.device)

    def draft_shown(self, sequence, length, span):
        tokens, shown = self._chain(self.drafter, *self._inputs(sequence, length), self.gamma, span, shown=True)
        return tokens, torch.full((), self.gamma, dtype=torch.long, device=tokens.device), shown

    def sample(self, sequence, length, span, warp, generator):
        noise = exponential_noise((self.gamma, self.drafter.head.scored), generator, sequence.device)
        tokens, q = self._chain(self.drafter, *self._inputs(sequence, length), self.gamma, span,
                                (warp.temperature, warp.top_k, warp.top_p, warp.filtered), noise)
        return tokens, torch.full((), self.gamma, dtype=torch.long, device=tokens.device), q

    def draft_tree(self, sequence, length, span):
        return self._tree(self.drafter, *self._inputs(sequence, length), self.gamma, self.tree, span)

    def observe(self, hidden, rows, accepted) -> None:
        self.space.features.copy_(hidden.index_select(0, rows))
        self.space.count.copy_(accepted + 1)
