"""`ngram`'s lookup on the device: what NgramIndex (ngram.py) finds, as tensor functions over the sequence held
on the device (its first `length` [1] entries), which a CUDA graph can hold. Nothing here reads a value back to
the host: no tensor is indexed by a 0-d tensor (gather / index_select instead), no tensor is made from a host
list. The device loop (device_loop.py) replays them; on a CPU they run eagerly (the tests)."""
from __future__ import annotations

import torch

from ..runners.graphs import compiled_static
from ..rule.tree_device import candidates_tree
from .base import DeviceLookup

PER_SIZE = 8  # NgramIndex.candidates' per_size: latest occurrences of each suffix n-gram looked at
# the sequence's own matches weigh this times 4^(n-1) on the device, and so in `retrieval` on the host, which weighs
# the datastore's below them; whole-number weights add up exactly, in any order (this lookup adds them in
# another order than tree.py and must break the same ties)
SEQUENCE_WEIGHT = 100.0


def latest_matches(sequence: torch.Tensor, length: torch.Tensor, sizes: tuple[int, ...], per_size: int) -> torch.Tensor:
    """sequence [C] (the first `length` [1] entries hold the sequence) -> [len(sizes), per_size]: for each n in
    sizes, where the continuations of the latest `per_size` earlier occurrences of the sequence's last n tokens
    start (latest first; -1 where there are fewer), as NgramIndex.ends holds them."""
    capacity = sequence.shape[0]
    ends = torch.arange(capacity, device=sequence.device)  # an occurrence's last token
    last = length - 1
    match = ends <= length - 2  # an occurrence has a token after it
    by_size = []
    for back in range(max(sizes)):
        tail = sequence[(last - back).clamp(min=0)]
        earlier = torch.cat([sequence.new_full((back,), -1), sequence[:capacity - back]]) if back else sequence
        match = match & (earlier == tail) & (last - back >= 0)
        by_size.append(match)  # [n - 1]: the last n tokens match
    chosen = torch.stack([by_size[n - 1] for n in sizes])  # [S, C]
    # each occurrence's rank from the latest (0 = the latest): the matches after it, from a running count; slot
    # k takes the occurrence of rank k (cheaper than topk or a scatter into a sink slot: docs/fast-path.md)
    seen = chosen.int().cumsum(-1)
    later = seen[:, -1:] - seen
    rank = torch.arange(per_size, device=sequence.device)[None, :, None]
    hit = chosen[:, None, :] & (later[:, None, :] == rank)  # [S, per_size, C]
    latest = torch.where(hit, ends + 1, -1).amax(-1)
    return latest


def gather_runs(source: torch.Tensor, starts: torch.Tensor, width: int, end: torch.Tensor | int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """starts [...] (-1: none) -> (source[start + j] for j < width [..., width], valid: start >= 0 and
    start + j < end)."""
    index = starts[..., None] + torch.arange(width, device=starts.device)
    valid = (starts[..., None] >= 0) & (index < end)
    return source[index.clamp(0, source.shape[0] - 1)], valid


def ngram_draft(sequence, length, gamma: int, sizes: tuple[int, ...]):
    """NgramIndex.continuation: what followed the latest occurrence of the longest matching suffix."""
    starts = latest_matches(sequence, length, sizes, 1)[:, 0]
    found = starts >= 0
    start = torch.where(found.any(), starts.gather(0, found.int().argmax()[None])[0], -1)
    tokens, valid = gather_runs(sequence, start, gamma, length)
    return torch.where(valid, tokens, 0), valid.sum()


def own_candidates(sequence, length, gamma: int, sizes: tuple[int, ...]):
    """The sequence's own continuations as NgramIndex.candidates gives them, weighted SEQUENCE_WEIGHT *
    4^(n-1): (tokens, valid [len(sizes) * PER_SIZE, gamma], weights)."""
    starts = latest_matches(sequence, length, sizes, PER_SIZE)
    own, own_valid = gather_runs(sequence, starts, gamma, length)
    # sizes run down one by one (range(max_ngram, min_ngram - 1, -1)); no host list becomes a tensor here: a
    # copy from the host cannot be captured in a graph
    sizes_here = sizes[0] - torch.arange(len(sizes), device=sequence.device, dtype=torch.float64)
    weights = (SEQUENCE_WEIGHT * torch.pow(4.0, sizes_here - 1))[:, None].expand(len(sizes), PER_SIZE)
    return own.reshape(-1, gamma), own_valid.reshape(-1, gamma), weights.reshape(-1)


class NgramLookup(DeviceLookup):
    """NgramProposer's drafts on the device: a chain (the latest match's continuation) or a tree's candidates
    (the continuations of every size's latest PER_SIZE matches). sizes: the n-gram sizes, longest first, one
    by one."""

    def __init__(self, gamma: int, tree: int, sizes: tuple[int, ...], compiled: bool = False):
        if list(sizes) != list(range(sizes[0], sizes[-1] - 1, -1)):
            raise ValueError(f"n-gram sizes must run down one by one, got {sizes}")
        self.gamma, self.tree, self.sizes = gamma, tree, sizes
        self._chain = compiled_static(ngram_draft) if compiled else ngram_draft
        self._own = compiled_static(own_candidates) if compiled else own_candidates
        self._tree = compiled_static(candidates_tree) if compiled else candidates_tree

    def key(self) -> tuple:
        return ("ngram", self.gamma, self.tree, self.sizes)

    def draft(self, sequence, length, span=None):
        return self._chain(sequence, length, self.gamma, self.sizes)

    def draft_tree(self, sequence, length, span=None):
        return self._tree(self.candidates(sequence, length), self.tree)

    def own(self, sequence, length):
        return self._own(sequence, length, self.gamma, self.sizes)

    def candidates(self, sequence, length):
        return (self.own(sequence, length),)
