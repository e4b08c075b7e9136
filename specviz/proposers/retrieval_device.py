"""`retrieval`'s lookup on the device: the sequence's own candidates (ngram_device.py) and the datastore's
continuations (Datastore.continuations, by binary search over the keys on the device), merged into the weighted
trie's heaviest line or best nodes (tree_device.py) as RetrievalProposer merges them on the host."""
from __future__ import annotations

import weakref

import numpy as np
import torch

from ..runners.graphs import compiled_static
from ..rule.tree_device import heaviest_line
from .ngram_device import NgramLookup, gather_runs, own_candidates


class DeviceDatastore:
    """A Datastore's arrays on the device: the keys (uint64 with the top bit flipped, so that int64 order is
    their order), the positions in key order, the tokens."""

    def __init__(self, store, device: torch.device):
        # no reference to `store` kept: _stores maps it weakly to this, and a reference back would keep it alive
        self.width, self.bits, self.separator = store.width, store.bits, store.separator
        flipped = (store.keys ^ np.uint64(1 << 63)).view(np.int64)
        self.keys = torch.from_numpy(flipped).to(device)
        self.order = torch.from_numpy(store.order).to(device)
        self.tokens = torch.from_numpy(store.tokens.astype(np.int64)).to(device)
        self.size = store.size

    def query_keys(self, context: torch.Tensor) -> torch.Tensor:
        """context [width]: the last tokens, nearest first -> [2 * width] flipped keys: for each n = 1..width
        the first key whose n nearest tokens are context[:n] and the first past them (Datastore.prefix_range)."""
        shift = self.bits * (self.width - 1)
        # the nearest token in the top bits; subtracting 2^63 there flips the top bit without overflowing int64
        low = (context[0] - (1 << (63 - shift))) * (1 << shift)
        bounds = []
        for n in range(1, self.width + 1):
            if n > 1:
                low = low + context[n - 1] * (1 << (self.bits * (self.width - n)))
            bounds += [low, low + (1 << (self.bits * (self.width - n)))]
        return torch.stack(bounds)

    def continuations(self, sequence: torch.Tensor, length: torch.Tensor, width: int, limit: int
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Datastore.continuations on the device: (tokens [limit, width], valid [limit, width], n [])."""
        back = torch.arange(self.width, device=sequence.device)
        context = sequence[(length - 1 - back).clamp(min=0)]
        found = torch.searchsorted(self.keys, self.query_keys(context)).view(self.width, 2)
        present = (found[:, 1] > found[:, 0]) & (back < length)
        n = present.int().cumprod(0).sum()  # the longest suffix that occurs (the ranges nest)
        first, last = found.index_select(0, (n - 1).clamp(min=0)[None])[0].unbind(-1)
        count = torch.where(n > 0, last - first, 0)
        picks = torch.arange(limit, device=sequence.device)
        # taken evenly over the occurrences, as the host does
        index = torch.where(count > limit, first + picks * (count - 1) // max(1, limit - 1), first + picks)
        starts = torch.where(picks < count, self.order[index.clamp(0, self.size - 1)], -1)
        tokens, valid = gather_runs(self.tokens, starts, width, self.tokens.shape[0])
        valid = valid & (tokens != self.separator).int().cumprod(-1).bool()  # cut at the end of its text
        return tokens, valid, n


_stores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Datastore -> {device: DeviceDatastore}


def device_datastore(store, device: torch.device) -> DeviceDatastore:
    """One copy per datastore and device (the graphs hold its addresses)."""
    copies = _stores.setdefault(store, {})
    if device not in copies:
        copies[device] = DeviceDatastore(store, device)
    return copies[device]


_side_streams: dict = {}  # device -> the stream the datastore's lookup is captured on


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """One per device, made when a lookup graph is first captured (a replay needs none: the graph holds the
    fork and the join)."""
    if device not in _side_streams:
        _side_streams[device] = torch.cuda.Stream(device)
    return _side_streams[device]


def stored_candidates(sequence, length, gamma: int, store: DeviceDatastore, limit: int, store_scale: float):
    """The datastore's continuations, weighted store_scale * 4^(n-1): (tokens, valid [limit, gamma], weights)."""
    stored, stored_valid, n = store.continuations(sequence, length, gamma, limit)
    return stored, stored_valid, (store_scale * torch.pow(4.0, (n - 1).double())).expand(limit)


def line_of(own, stored):
    """The heaviest line of both sets of candidates (each: tokens, valid, weights), the sequence's first."""
    return heaviest_line(*(torch.cat([a, b]) for a, b in zip(own, stored)))


def retrieval_draft(sequence, length, gamma: int, sizes: tuple[int, ...], store: DeviceDatastore, limit: int,
                    store_scale: float):
    """RetrievalProposer's chain (the loop runs its three parts, the first two side by side)."""
    return line_of(own_candidates(sequence, length, gamma, sizes),
                   stored_candidates(sequence, length, gamma, store, limit, store_scale))


class RetrievalLookup(NgramLookup):
    """RetrievalProposer's drafts on the device. store_scale: a datastore match's weight against one of the
    sequence's own (both scaled so that weights are whole numbers: ties break as on the host). streams: look
    up both sources side by side on two CUDA streams (inside a graph)."""

    def __init__(self, gamma: int, tree: int, sizes: tuple[int, ...], store: DeviceDatastore, limit: int,
                 store_scale: float, compiled: bool = False, streams: bool = False):
        super().__init__(gamma, tree, sizes, compiled)
        self.store, self.limit, self.store_scale, self.streams = store, limit, store_scale, streams
        self._stored = compiled_static(stored_candidates) if compiled else stored_candidates
        self._line = compiled_static(line_of) if compiled else line_of

    def key(self) -> tuple:
        return ("retrieval", self.gamma, self.tree, self.sizes, id(self.store), self.limit, self.store_scale)

    def draft(self, sequence, length, span=None):
        return self._line(*self.candidates(sequence, length))

    def candidates(self, sequence, length):
        """The sequence's and the datastore's candidates; with streams, side by side (a graph keeps the fork
        and the join): each is a few small kernels, and the line waits for the slower only."""
        stored = lambda: self._stored(sequence, length, self.gamma, self.store, self.limit,  # noqa: E731
                                      self.store_scale)
        if not self.streams:
            return self.own(sequence, length), stored()
        main, side = torch.cuda.current_stream(sequence.device), side_stream(sequence.device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            theirs = stored()
        own = self.own(sequence, length)
        main.wait_stream(side)
        for tensor in theirs:  # made on the side stream, read on the main one: not reused before that
            tensor.record_stream(main)
        return own, theirs
