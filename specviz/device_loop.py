"""The device loop: greedy plain, `ngram` and `retrieval` decoding (chains and draft trees) with every step's
work on the GPU.

Why: on an H100 a verify pass of the 135M target takes ~1.0 ms of GPU time, and the host loop (engine.py)
spends 0.2 ms (plain) to 0.5 ms (retrieval) a step on the host while the GPU waits: reading the verdict,
looking up the next draft, launching the next pass (scripts/gpu_forward_floor.py measured it). Here a step is
two CUDA graphs that read and write only device tensors:

1. the lookup: the draft (sequence n-gram matches, and for `retrieval` the datastore's continuations, merged
   into the weighted trie's heaviest line as tree.heaviest_line merges them) written into the verify pass's
   input;
2. the verify pass (the fast path's forward, runners.static.StaticRunner.decode) and greedy acceptance: the accepted
   tokens appended to the sequence on the device, the next pass's first token and position set.

With a draft tree (`--tree N`), the lookup writes the weighted trie's N best nodes (weighted_tree, the trees
tree.weighted_trie makes) with their depths and visibility; the verify pass walks the tree greedily
(walk_tree) and moves the accepted path's keys and values next to the root's, as StaticRunner.keep_nodes does.

The host only replays them and reads each step's log (its draft, the target's choices, how many were accepted)
one step behind, while the GPU runs the next step: the GPU never waits for the host. The run stops on the host's
reading (max_new_tokens, EOS): the step already launched then is computed and dropped (its time is counted).

Nothing in a step reads a value back to the host (a graph cannot hold that): no tensor is indexed by a 0-d
tensor (that reads the index back), gather / index_select instead; no tensor is made from a host list.

Exactly the drafts of the host proposers (tests compare them step by step), and greedy acceptance as
verify.verify_greedy does it: the output is plain greedy output. The same functions run eagerly on a CPU
(the tests), without graphs.
"""
from __future__ import annotations

import os
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from . import tree as trees
from .proposers import NgramProposer, PlainProposer, RetrievalProposer
from .proposers.retrieval import SEQUENCE_WEIGHT

PER_SIZE = 8  # NgramIndex.candidates' per_size: latest occurrences of each suffix n-gram looked at


# the lookups: pure tensor functions ------------------------------------------------------------------------

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
    # k takes the occurrence of rank k (topk took 60 us on an H100, a scatter into a sink slot 25 us)
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


def trie_groups(tokens: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor):
    """tokens, valid [M, G] (candidate m's run: the valid prefix of its row), weights [M] -> (group [M, M, G]:
    candidate j agrees with candidate i up to depth d; the weight of i's group at d [M, G]; its first member
    [M, G]). A group at depth d is a node of the candidates' trie."""
    same = (tokens[:, None, :] == tokens[None, :, :]) & valid[:, None, :] & valid[None, :, :]  # [i, j, d]
    group = same.int().cumprod(-1).bool()
    weight = (group * weights[None, :, None]).sum(1)
    first = group.int().argmax(1)  # argmax returns the first of equals
    return group, weight, first


def heaviest_line(tokens: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tree.heaviest_line without a loop over depths. tokens, valid [M, G] (candidate m's run: the valid prefix
    of its row), weights [M] -> (the line [G], zeros past its end; its length [], a tensor).

    At each depth the host version keeps the group (same token there) of the candidates still on the line
    with the most weight, ties to the group seen first. Here, for every candidate i and depth d at once: its
    group (the candidates that agree with it up to d), the group's weight and first member, and whether its
    group wins among the groups of its parent (the candidates that agree with it up to d - 1); the line
    follows the candidates that win at every depth so far. Weights must add exactly (whole numbers)."""
    count = tokens.shape[0]
    group, weight, first = trie_groups(tokens, valid, weights)
    score = torch.where(valid, weight * count + (count - 1 - first), -1.0)  # heavier first, then earlier
    parent = torch.cat([valid[None, :, :1].expand(count, count, 1), group[:, :, :-1]], dim=-1)
    best_in_parent = torch.where(parent, score[None, :, :], -1.0).amax(1)
    on_line = (valid & (score == best_in_parent)).int().cumprod(-1).bool()  # [M, G]
    reached = on_line.any(0)
    line = tokens.gather(0, on_line.int().argmax(0)[None])[0]
    return torch.where(reached, line, 0), reached.sum()


def weighted_tree(tokens: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor, budget: int):
    """tree.weighted_trie without a loop: tokens, valid [M, G] (candidate m's run: the valid prefix of its
    row), weights [M] (whole numbers) -> the `budget` heaviest nodes of the candidates' trie, best first (a
    parent before its children, siblings best first; past the real nodes, padding):
    (tokens [B], parents [B] (-1: the root), depths [B] (1: the root's children), real [B] (the first nodes),
    ancestors [B, B] (node b sees node a: a is b or above it; a padding node sees itself only)).

    A node is a candidate's prefix up to depth d, named by the first candidate that has it (as the host's trie
    makes it first). weighted_trie pops nodes best first by (weight, first candidate, depth): a child never
    comes before its parent in that order (no heavier; if as heavy, a later or the same first candidate, and
    deeper), so the `budget` first nodes in it form a tree, and its order is the host's order of siblings."""
    count, width = tokens.shape
    group, weight, first = trie_groups(tokens, valid, weights)
    members = torch.arange(count, device=tokens.device)
    named = valid & (first == members[:, None])  # node (i, d) is named by i
    flat = count * width
    place = torch.arange(flat, device=tokens.device).view(count, width)  # i * G + d: first candidate, then depth
    # one key that orders nodes as the host's heap pops them (exact in float64: the weights are whole numbers)
    key = torch.where(named, weight * flat + (flat - 1 - place), -1.0).reshape(-1)
    rank = (key[None, :] > key[:, None]).sum(1)  # nodes ahead of each
    chosen = named.reshape(-1) & (rank < budget)
    slots = torch.arange(budget, device=tokens.device)
    sink = torch.where(chosen, rank, budget)  # the nodes not chosen go to a slot past the end
    node = torch.zeros(budget + 1, dtype=torch.long, device=tokens.device).index_copy_(
        0, sink, torch.arange(flat, device=tokens.device))[:budget]
    real = slots < chosen.sum()
    row, depth = node // width, node % width
    above = (depth - 1).clamp(min=0)  # the parent of node (i, d): node (first[i, d - 1], d - 1)
    parent_node = first.reshape(-1).gather(0, row * width + above) * width + above
    parents = torch.where(real & (depth > 0), rank.gather(0, parent_node), -1)
    sees = (depth[None, :] <= depth[:, None]) & group.reshape(-1).gather(
        0, ((row[:, None] * count + row[None, :]) * width + depth[None, :]).reshape(-1)).view(budget, budget)
    both = real[:, None] & real[None, :]
    ancestors = torch.where(both, sees, slots[:, None] == slots[None, :])
    node_tokens = torch.where(real, tokens.reshape(-1).gather(0, node), 0)
    return node_tokens, parents, torch.where(real, depth + 1, 1), real, ancestors


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


def accept_greedy(logits: torch.Tensor, draft: torch.Tensor, draft_length: torch.Tensor):
    """verify.verify_greedy on the device: logits [G + 1, V], draft [G] (its first draft_length real) ->
    (the target's choices [G + 1], accepted n [], the next token [])."""
    choices = logits.argmax(-1)
    gamma = draft.shape[0]
    agrees = (draft == choices[:gamma]) & (torch.arange(gamma, device=draft.device) < draft_length)
    accepted = agrees.int().cumprod(0).sum()
    return choices, accepted, choices.gather(0, accepted[None])[0]


def advance(logits, sequence, length, inputs, draft_length, log) -> None:
    """After a verify pass over inputs = [the last token, the draft [G], the first position]: accept greedily,
    append the accepted drafts and the next token to sequence (the first `length` [1] entries; its last entry
    is a sink for the slots not written), and set the next pass's first token and position. log [2G + 3]:
    the draft, the target's choices, the draft's length, accepted."""
    gamma = inputs.shape[0] - 2
    draft = inputs[1:gamma + 1]
    choices, accepted, next_token = accept_greedy(logits, draft, draft_length)
    slots = torch.arange(gamma + 1, device=inputs.device)
    values = torch.where(slots < accepted, torch.cat([draft, draft.new_zeros(1)]), next_token)
    sink = sequence.shape[0] - 1
    sequence.index_copy_(0, torch.where(slots <= accepted, length + slots, sink), values)
    log.copy_(torch.cat([draft, choices, draft_length[None], accepted[None]]))
    length.add_(accepted + 1)
    inputs[0].copy_(next_token)
    inputs[gamma + 1:].copy_(length - 1)


def tree_lookup(candidates, budget: int, inputs, depths, visible, parents, real) -> None:
    """A draft tree of the candidates (own, or own and stored: each tokens, valid, weights) written into the
    verify pass's inputs: ids (the root first), depths [B + 1] and visibility [B + 1, B + 1] (the root sees
    itself, every node the root and its ancestors), and parents, real [B] (what advance_tree reads)."""
    tokens, valid, weights = (torch.cat(parts) for parts in zip(*candidates))
    node_tokens, node_parents, node_depths, node_real, ancestors = weighted_tree(tokens, valid, weights, parents.shape[0])
    inputs[1:node_tokens.shape[0] + 1].copy_(node_tokens)
    depths[1:].copy_(node_depths)
    visible[1:, 1:].copy_(ancestors)
    parents.copy_(node_parents)
    real.copy_(node_real)


def walk_tree(logits, tokens, parents, real, ancestors, depths, gamma: int):
    """tree.walk_greedy on the device: logits [B + 1, V] (row 0 the root's, row b + 1 node b's), the tree's
    tokens, parents, real [B], ancestors [B, B], depths [B] -> (the target's choices [B + 1], accepted n [], the
    accepted path: its node at each depth [gamma] (the first n real), the next token []). A node is on the
    path when it and every node above it are the target's choice after their parent (at most one child of a
    node can be: siblings differ)."""
    choices = logits.argmax(-1)
    agrees = real & (tokens == choices.gather(0, parents + 1))
    on_path = real & ~(ancestors & ~agrees[None, :]).any(-1)
    accepted = torch.where(on_path, depths, 0).amax()
    levels = torch.arange(1, gamma + 1, device=tokens.device)
    path = (on_path[None, :] & (depths[None, :] == levels[:, None])).int().argmax(-1)
    last_row = torch.where(accepted > 0, path.gather(0, (accepted - 1).clamp(min=0)[None])[0] + 1, 0)
    return choices, accepted, path, choices.gather(0, last_row[None])[0]


def advance_tree(logits, sequence, length, inputs, depths, visible, parents, real, log, gamma: int):
    """advance() after a tree verify pass over inputs = [the last token, the tree [B], the first position]:
    the accepted path's tokens and the next token appended. Returns (the cache slots of the path's nodes, the
    slots they move to: right after the root's), for the caller to move their keys and values. log [3B + 3]:
    the tree's tokens, parents, the target's choices, the number of real nodes, accepted."""
    budget = parents.shape[0]
    tokens = inputs[1:budget + 1]
    choices, accepted, path, next_token = walk_tree(logits, tokens, parents, real, visible[1:, 1:], depths[1:], gamma)
    slots = torch.arange(gamma + 1, device=inputs.device)
    values = torch.where(slots < accepted, torch.cat([tokens.gather(0, path), tokens.new_zeros(1)]), next_token)
    sink = sequence.shape[0] - 1
    sequence.index_copy_(0, torch.where(slots <= accepted, length + slots, sink), values)
    start = inputs[-1:]  # the root's slot
    behind = start + 1 + slots[:gamma]
    moved = torch.where(slots[:gamma] < accepted, start + 1 + path, behind)  # the rest stay: past what is kept
    log.copy_(torch.cat([tokens, parents, choices, real.sum()[None], accepted[None]]))
    length.add_(accepted + 1)
    inputs[0].copy_(next_token)
    inputs[-1:].copy_(length - 1)
    return moved, behind


# the loop ---------------------------------------------------------------------------------------------------

class LoopState:
    """The tensors that a loop's graphs read and write (fixed addresses) and its graphs: one lookup graph and
    one verify graph per attention span. Kept in the runner's workspace beside the runner's own graphs (and
    dropped with them when the cache grows). tree: the nodes of a draft tree (0: a chain)."""

    def __init__(self, device: torch.device, capacity: int, gamma: int, tree: int = 0):
        self.capacity = capacity
        width = tree + 1 if tree else gamma + 1  # the verify pass's positions
        self.sequence = torch.zeros(capacity + gamma + 2, dtype=torch.long, device=device)  # last entry: a sink
        self.length = torch.zeros(1, dtype=torch.long, device=device)
        self.inputs = torch.zeros(width + 1, dtype=torch.long, device=device)  # the verify pass's: ids, start
        self.draft_length = torch.zeros((), dtype=torch.long, device=device)
        self.log = torch.zeros(3 * tree + 3 if tree else 2 * gamma + 3, dtype=torch.long, device=device)
        if tree:  # the tree's layout (tree_lookup writes it)
            self.depths = torch.zeros(width, dtype=torch.long, device=device)
            self.visible = torch.eye(width, dtype=torch.bool, device=device)
            self.visible[:, 0] = True
            self.parents = torch.full((tree,), -1, dtype=torch.long, device=device)
            self.real = torch.zeros(tree, dtype=torch.bool, device=device)
        self.lookup_graph: torch.cuda.CUDAGraph | None = None
        self.verify_graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def start(self, sequence: torch.Tensor) -> None:
        """sequence [T] on the device: copies that queue behind what runs there (a prefill), no wait."""
        count = sequence.shape[0]
        self.sequence[:count].copy_(sequence, non_blocking=True)
        self.length.fill_(count)
        self.inputs[:1].copy_(sequence[-1:], non_blocking=True)
        self.inputs[-1].fill_(count - 1)


@dataclass
class StepOutcome:
    draft_ids: list[int]
    choices: list[int]  # the target's argmax after each draft prefix [len(draft_ids) + 1]
    n_accepted: int
    draft_ms: float
    verify_ms: float
    tree_size: int = 0  # a tree's nodes (draft_ids: the line shown, as the host loop's _verify_tree shows it)


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


def mode() -> str:
    """SPECVIZ_DEVICE_LOOP: "1" (default) where the fast path has CUDA graphs, "0" never, "force" also without
    graphs (eagerly, a step at a time: how the tests run it on a CPU)."""
    return os.environ.get("SPECVIZ_DEVICE_LOOP", "1")


_compiled: dict = {}


def _maybe_compiled(fn, compile: bool):
    if not compile:
        return fn
    if fn not in _compiled:
        _compiled[fn] = torch.compile(fn, dynamic=False)
    return _compiled[fn]


class DeviceLoop:
    """One run's steps on the device (the module's docstring). lookup: "plain", "ngram" or "retrieval"; tree:
    draft trees of that many nodes (ngram, retrieval), 0 for chains."""

    def __init__(self, runner, lookup: str, gamma: int, sizes: tuple[int, ...] = (3, 2, 1), store=None,
                 limit: int = 32, store_scale: float = 1.0, tree: int = 0):
        if list(sizes) != list(range(sizes[0], sizes[-1] - 1, -1)):
            raise ValueError(f"n-gram sizes must run down one by one, got {sizes}")
        self.runner, self.lookup, self.sizes, self.limit, self.store_scale = runner, lookup, sizes, limit, store_scale
        self.gamma = 0 if lookup == "plain" else gamma
        self.tree = 0 if lookup == "plain" else tree
        self.width = self.tree + 1 if self.tree else self.gamma + 1  # the verify pass's positions
        # how far past a run's tokens the steps launched ahead reach: one more step in flight (gamma + 1 tokens)
        # and a verify pass's own positions, with a step's worth to spare
        self.ahead = 2 * (self.gamma + 1) + self.width
        self.device = runner.device
        self.graphs = runner.use_graphs
        self.store = device_datastore(store, self.device) if lookup == "retrieval" else None
        compiled = self.graphs and runner.use_compile
        self._ngram = _maybe_compiled(ngram_draft, compiled)
        self._own = _maybe_compiled(own_candidates, compiled)
        self._stored = _maybe_compiled(stored_candidates, compiled)
        self._line = _maybe_compiled(line_of, compiled)
        self._advance = _maybe_compiled(advance, compiled)
        self._tree_lookup = _maybe_compiled(tree_lookup, compiled)
        self._advance_tree = _maybe_compiled(advance_tree, compiled)

    @classmethod
    def for_run(cls, runner, proposer, settings, detail: bool, prompt_length: int) -> "DeviceLoop | None":
        """The loop for this run where it applies: greedy, records without detail (the bench), the fast path
        with graphs, a plain / ngram / retrieval chain, and room in the context for a step launched ahead."""
        wanted = mode()
        if wanted == "0" or detail or not settings.greedy:
            return None
        if not hasattr(runner, "decode") or not (runner.use_graphs or wanted == "force"):
            return None
        kind = {PlainProposer: "plain", NgramProposer: "ngram", RetrievalProposer: "retrieval"}.get(type(proposer))
        if kind is None or (settings.tree and kind != "plain" and not runner.supports_tree):
            return None
        if kind == "plain":
            loop = cls(runner, kind, 0)
        else:
            sizes, tree = tuple(range(proposer.max_ngram, proposer.min_ngram - 1, -1)), settings.tree
            if kind == "retrieval":
                loop = cls(runner, kind, settings.gamma, sizes, proposer.datastore, proposer.store_limit,
                           proposer.store_weight * SEQUENCE_WEIGHT, tree=tree)
            else:
                loop = cls(runner, kind, settings.gamma, sizes, tree=tree)
        if prompt_length + settings.max_new_tokens + loop.ahead + loop.gamma + 1 > runner.context_length:
            return None
        return loop

    # what the graphs run --------------------------------------------------------------------------------
    def _lookup_step(self, state: LoopState) -> None:
        if self.tree:
            if self.lookup == "ngram":
                candidates = (self._own(state.sequence, state.length, self.gamma, self.sizes),)
            else:
                candidates = self._both_candidates(state)
            self._tree_lookup(candidates, self.tree, state.inputs, state.depths, state.visible, state.parents,
                              state.real)
            return
        if self.lookup == "ngram":
            draft, length = self._ngram(state.sequence, state.length, self.gamma, self.sizes)
        else:
            draft, length = self._line(*self._both_candidates(state))
        state.inputs[1:self.gamma + 1].copy_(draft)
        state.draft_length.copy_(length)

    def _both_candidates(self, state: LoopState):
        """The sequence's and the datastore's candidates; on a GPU side by side on two streams (a graph keeps
        the fork and the join): each is a few small kernels, and the line waits for the slower only."""
        look_up_own = lambda: self._own(state.sequence, state.length, self.gamma, self.sizes)  # noqa: E731
        look_up_stored = lambda: self._stored(state.sequence, state.length, self.gamma, self.store,  # noqa: E731
                                              self.limit, self.store_scale)
        if not self.graphs:
            return look_up_own(), look_up_stored()
        main, side = torch.cuda.current_stream(self.device), side_stream(self.device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            stored = look_up_stored()
        own = look_up_own()
        main.wait_stream(side)
        for tensor in stored:  # made on the side stream, read on the main one: not reused before that
            tensor.record_stream(main)
        return own, stored

    def _verify_step(self, state: LoopState, span: int) -> None:
        # the logits in the model's dtype: the argmax of bfloat16 values is that of their float32 copies
        tree = (state.depths, state.visible) if self.tree else (None, None)
        logits, _ = self.runner.decode(state.inputs[:self.width], state.inputs[-1:], span, False, *tree,
                                       float_logits=False)
        if not self.tree:
            self._advance(logits, state.sequence, state.length, state.inputs, state.draft_length, state.log)
            return
        moved, behind = self._advance_tree(logits, state.sequence, state.length, state.inputs, state.depths,
                                           state.visible, state.parents, state.real, state.log, self.gamma)
        # the accepted nodes' keys and values (every layer's) moved next to the root's, as runner.keep_nodes
        # does; outside compiled code, which might copy the whole cache to write into it
        self.runner.move_slots(moved, behind)

    # state and graphs -----------------------------------------------------------------------------------
    def _state(self) -> LoopState:
        space = self.runner.workspace
        key = ("device-loop", self.lookup, self.gamma, self.tree, self.sizes, id(self.store), self.limit,
               self.store_scale)
        state = space.users.get(key)
        if state is None or state.capacity != space.capacity:
            state = space.users[key] = LoopState(self.device, space.capacity, self.gamma, self.tree)
        return state

    def _capture(self, state: LoopState, span: int) -> None:
        from .runners.graphs import capture_graph

        space = self.runner.workspace
        if self.gamma and state.lookup_graph is None:
            graph = torch.cuda.CUDAGraph()
            capture_graph(graph, lambda: self._lookup_step(state), self.device, space)  # idempotent
            state.lookup_graph = graph
        # a verify step moves the state on: it runs three times while captured, and is put back after
        saved = [tensor.clone() for tensor in (state.sequence, state.length, state.inputs)]
        graph = torch.cuda.CUDAGraph()
        capture_graph(graph, lambda: self._verify_step(state, span), self.device, space)
        for tensor, value in zip((state.sequence, state.length, state.inputs), saved):
            tensor.copy_(value)
        state.verify_graphs[span] = graph

    def _spans(self, max_length: int) -> list[int]:
        from .runners.graphs import MIN_SPAN, graph_span

        last, spans = graph_span(max_length, self.runner.context_length), []
        span = min(MIN_SPAN, last)
        while span < last:
            spans.append(span)
            span *= 2
        return spans + [last]

    def reserve(self, max_length: int) -> None:
        """Room in the cache for runs of up to max_length tokens, with the steps launched ahead."""
        from .runners.graphs import graph_span

        self.runner.ensure_capacity(graph_span(max_length + self.ahead + self.gamma + 1, self.runner.context_length))

    @torch.inference_mode()
    def prepare(self, max_length: int) -> None:
        """Capture, untimed, every graph that runs of up to max_length tokens replay (api.warm_up)."""
        self.reserve(max_length)
        if self.graphs:
            state = self._state()
            for span in self._spans(max_length + self.ahead + self.gamma + 1):
                if span not in state.verify_graphs:
                    self._capture(state, span)

    # the run --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def steps(self, sequence: torch.Tensor, max_new_tokens: int):
        """Yields a StepOutcome a step, read one step behind the device. sequence [T]: on the runner's device;
        the runner's cache must hold sequence[:-1] (the engine's prefill). No step is launched once those in
        flight give max_new_tokens; to stop earlier (an EOS), stop pulling: the step in flight is then computed
        and dropped (the caller's clock waits for it)."""
        from .runners.graphs import graph_span

        gamma = self.gamma
        self.reserve(sequence.shape[0] + max_new_tokens)
        state = self._state()
        state.start(sequence)
        produced, step, in_flight = 0, 0, deque()  # produced: tokens of the steps read so far
        most = max_new_tokens + 1  # every step adds a token: never reached
        rows = torch.empty((most, state.log.shape[0]), dtype=torch.long, pin_memory=self.graphs)
        while True:
            enough = produced + len(in_flight) >= max_new_tokens  # what is in flight adds a token a step at least
            if len(in_flight) < 2 and not enough and step < most:  # two in flight: the GPU never waits for the host
                # the step in flight may add gamma + 1 tokens; the span covers what the new one writes
                span = graph_span(sequence.shape[0] + produced + self.ahead, self.runner.context_length)
                in_flight.append((step, self._launch(state, span, rows[step])))
                step += 1
                continue
            if not in_flight:
                return
            done, events = in_flight.popleft()
            outcome = self._read(events, rows[done])
            produced += outcome.n_accepted + 1
            yield outcome

    def _launch(self, state: LoopState, span: int, row: torch.Tensor):
        if not self.graphs:  # eagerly, a step at a time
            if self.gamma:
                self._lookup_step(state)
            self._verify_step(state, span)
            row.copy_(state.log)
            return None
        if span not in state.verify_graphs:
            self._capture(state, span)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        events[0].record()
        if state.lookup_graph is not None:
            state.lookup_graph.replay()
        events[1].record()
        state.verify_graphs[span].replay()
        row.copy_(state.log, non_blocking=True)
        events[2].record()
        return events

    def _read(self, events, row: torch.Tensor) -> StepOutcome:
        draft_ms = verify_ms = 0.0
        if events is not None:
            events[2].synchronize()
            draft_ms, verify_ms = events[0].elapsed_time(events[1]), events[1].elapsed_time(events[2])
        values, gamma = row.tolist(), self.gamma
        if self.tree:
            return self._tree_outcome(values, draft_ms, verify_ms)
        length, accepted = values[2 * gamma + 1], values[2 * gamma + 2]
        return StepOutcome(draft_ids=values[:length], choices=values[gamma:gamma + length + 1],
                           n_accepted=accepted, draft_ms=draft_ms, verify_ms=verify_ms)

    def _tree_outcome(self, values: list[int], draft_ms: float, verify_ms: float) -> StepOutcome:
        """A tree step's log, shown as the host loop's _verify_tree shows it: the accepted path, then the
        drafter's favourite line below where it stopped, with the target's choice before each."""
        budget = self.tree
        count, accepted = values[3 * budget + 1], values[3 * budget + 2]
        tokens, parents = values[:count], values[budget:budget + count]
        choices = values[2 * budget:2 * budget + count + 1]
        path = trees.walk_greedy(tokens, parents, choices).path
        if len(path) != accepted:
            raise RuntimeError(f"the device accepted {accepted} tree nodes where the host's walk accepts {len(path)}")
        line = path + trees.first_child_chain(parents, path[-1] if path else -1)
        return StepOutcome(draft_ids=[tokens[node] for node in line],
                           choices=[choices[row] for row in [0] + [node + 1 for node in line]],
                           n_accepted=accepted, draft_ms=draft_ms, verify_ms=verify_ms,
                           tree_size=0 if trees.is_chain(parents) else count)  # as the host loop counts it
