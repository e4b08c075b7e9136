"""Draft trees: several candidate continuations verified in one target forward (SpecInfer, Medusa, EAGLE-2).

A tree of N draft tokens is two lists: tokens[i] and parents[i] (-1 = a child of the root, the last accepted
token; otherwise an earlier node). Parents come before their children and siblings come in the drafter's order
of preference. The target is fed the root and the N nodes at once; node i sits at depth depths[i] (its
position is the root's plus its depth) and attends to the cached sequence, its ancestors and itself only.
Row 0 of the target's output is the root's, row i + 1 node i's.

Verification walks from the root. Greedy: move to the child whose token is the target's argmax, as long as
there is one. Sampling: try the children in order, each as a one-hot draft (accept with probability p(x); on
a rejection remove x from p and renormalise); after the last rejection draw from what is left. Each trial is
an exact speculative-sampling step with q = one-hot, so the output has exactly the target's distribution
(the multi-candidate rule of SpecInfer, Miao et al. 2024, for deterministic candidates).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from .sampling import draw


def check_tree(tokens: list[int], parents: list[int]) -> None:
    if len(tokens) != len(parents):
        raise ValueError(f"a tree needs one parent per token: {len(tokens)} tokens, {len(parents)} parents")
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i} has parent {parent}: parents must come before their children")


def depths(parents: list[int]) -> list[int]:
    """Depth of each node: 1 for the root's children."""
    out: list[int] = []
    for parent in parents:
        out.append(1 if parent < 0 else out[parent] + 1)
    return out


def children(parents: list[int]) -> list[list[int]]:
    """[0]: the root's children; [i + 1]: node i's; each in the drafter's order."""
    out: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, parent in enumerate(parents):
        out[parent + 1].append(i)
    return out


def ancestor_masks(parents: list[int]) -> list[int]:
    """Row r (0 = root, i + 1 = node i) as a Python integer bit mask: bit c is set iff c is r or an ancestor
    of r; each row is its parent's row plus itself (this runs on the host every tree step)."""
    rows = [1]  # the root sees itself
    for i, parent in enumerate(parents):
        rows.append(rows[parent + 1] | (1 << (i + 1)))
    return rows


def visibility(parents: list[int]) -> torch.Tensor:
    """[N + 1, N + 1] bool: row r (0 = root, i + 1 = node i) may attend to column c iff c is r or an ancestor
    (the device's own unpacking of visibility_words, run on the host)."""
    return unpack_visibility(visibility_words(parents), len(parents) + 1)


WORD = 64


def visibility_words(parents: list[int]) -> torch.Tensor:
    """visibility() packed for a device: [(N + 1) * W] int64 on the host, each row as W = ceil((N + 1) / 64)
    words, low bits first, row after row; unpack_visibility() turns them back into the bool matrix. A 64-node
    tree is 65 x 2 numbers to copy instead of 65 x 65."""
    rows = ancestor_masks(parents)
    words = -(-len(rows) // WORD)
    # each row's bytes, low first, read as 64-bit words (every platform torch runs on is little-endian): one
    # join in C instead of shifting word by word in Python, and no Python list to convert
    packed = bytearray(b"".join(row.to_bytes(words * WORD // 8, "little") for row in rows))
    return torch.frombuffer(packed, dtype=torch.int64)


def unpack_visibility(words: torch.Tensor, count: int) -> torch.Tensor:
    """words [count * W] int64 (visibility_words) -> [count, count] bool, with tensor operations (a graph
    captures them): bit c of row r is bit c % 64 of the row's word c // 64."""
    columns = torch.arange(count, device=words.device)
    rows = words.view(count, -1)
    return ((rows[:, columns // WORD] >> (columns % WORD)) & 1) != 0


def is_chain(parents: list[int]) -> bool:
    return all(parent == i - 1 for i, parent in enumerate(parents))


def first_child_chain(parents: list[int], node: int) -> list[int]:
    """The nodes below `node` (-1 = root) following each node's first child: the drafter's favourite line."""
    kids = children(parents)
    line = []
    while kids[node + 1]:
        node = kids[node + 1][0]
        line.append(node)
    return line


@dataclass
class TreeWalk:
    path: list[int]  # accepted nodes, root's child first
    next_token: int  # the bonus token (the path ended at a leaf) or the token drawn after the rejections
    tried: list[tuple[int, float, float | None]]  # (node, accept probability, uniform) for every trial on the way
    next_distribution: torch.Tensor | None  # what next_token was drawn from (sampling); None for greedy


def walk_greedy(tokens: list[int], parents: list[int], choices: list[int]) -> TreeWalk:
    """choices [N + 1]: the target's argmax at each row."""
    kids = children(parents)
    node, path, tried = -1, [], []
    while True:
        wanted = choices[node + 1]
        match = next((child for child in kids[node + 1] if tokens[child] == wanted), None)
        for child in kids[node + 1]:
            tried.append((child, float(child == match), None))
            if child == match:
                break
        if match is None:
            return TreeWalk(path, wanted, tried, None)
        path.append(match)
        node = match


def walk_sampled(tokens: list[int], parents: list[int], probs: torch.Tensor, generator: torch.Generator) -> TreeWalk:
    """probs [N + 1, V]: the target's (warped) distribution at each row."""
    kids = children(parents)
    node, path, tried = -1, [], []
    while True:
        p = probs[node + 1].clone()
        moved = False
        for child in kids[node + 1]:
            accept = float(p[tokens[child]].clamp(max=1.0))
            u = float(torch.rand(1, generator=generator, device=generator.device))
            tried.append((child, accept, u))
            if u < accept:
                path.append(child)
                node, moved = child, True
                break
            p[tokens[child]] = 0.0  # the residual norm(max(0, p - onehot(x)))
            total = p.sum()
            if total <= 0:  # every token with mass was tried: cannot happen after a rejection, kept as a guard
                p = probs[node + 1].clone()
                break
            p = p / total
        if not moved:
            return TreeWalk(path, int(draw(p, generator)), tried, p)


def best_nodes(scores: list[float], parents: list[int], tokens: list[int], budget: int) -> tuple[list[int], list[int]]:
    """From a tree of scored candidate nodes (a child never scores above its parent: scores are log
    probabilities or counts along a path), keep the `budget` best, a closed tree, and lay it out as tree.py
    wants: parents first, siblings best first. Returns (tokens, parents)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:budget]
    kept = set(order)
    kids: dict[int, list[int]] = {}
    for node in order:  # best first, so each kids list is best first too
        if parents[node] == -1 or parents[node] in kept:
            kids.setdefault(parents[node], []).append(node)
    return _preorder(tokens, parents, kids)


def _preorder(tokens: list[int], parents: list[int], kids: dict[int, list[int]]) -> tuple[list[int], list[int]]:
    """The nodes reachable from the root through `kids` (parent -> children, best first; -1 = the root), in
    preorder: every parent before its children, siblings best first. Returns (tokens, parents) renumbered."""
    out_tokens, out_parents, new_index = [], [], {}
    stack = list(reversed(kids.get(-1, [])))
    while stack:  # preorder: every parent before its children
        node = stack.pop()
        new_index[node] = len(out_tokens)
        out_tokens.append(tokens[node])
        out_parents.append(-1 if parents[node] == -1 else new_index[parents[node]])
        stack.extend(reversed(kids.get(node, [])))
    return out_tokens, out_parents


def _merged(candidates: list[tuple[list[int], float]]) -> tuple[list[tuple[int, ...]], list[float]]:
    """Identical candidates as one, their weights summed, in the order each was first seen."""
    merged: dict[tuple[int, ...], float] = {}
    for sequence, weight in candidates:
        if len(sequence):
            key = tuple(sequence)
            merged[key] = merged.get(key, 0.0) + weight
    return list(merged), list(merged.values())


def _next_tokens(members, sequences, weights, depth: int) -> dict[int, tuple[float, list[int]]]:
    """The candidates `members` (ascending) that go on past `depth`, grouped by their token there:
    token -> [the group's weight, its members], in the order the tokens are first seen."""
    groups: dict[int, list] = {}
    for i in members:
        sequence = sequences[i]
        if len(sequence) > depth:
            group = groups.get(sequence[depth])
            if group is None:
                groups[sequence[depth]] = group = [0.0, []]
            group[0] += weights[i]
            group[1].append(i)
    return groups


def weighted_trie(candidates: list[tuple[list[int], float]], budget: int) -> tuple[list[int], list[int]]:
    """Merge weighted candidate continuations into a trie, score each node by the weight of the candidates
    that pass through it, and keep the `budget` best nodes, laid out as best_nodes() lays them out (ties go to
    the node a trie built candidate by candidate would have made first: the earlier candidate, then the
    shallower node). Built best first: a node is expanded only once it is kept (a child never outscores its
    parent), so the long tails of candidates that never make the budget are never walked."""
    sequences, weights = _merged(candidates)
    frontier: list = []  # (-score, first candidate, depth, parent node, token, candidates through it)

    def push_children(members, depth: int, parent: int) -> None:
        for token, (score, group) in _next_tokens(members, sequences, weights, depth).items():
            heapq.heappush(frontier, (-score, group[0], depth, parent, token, group))

    push_children(range(len(sequences)), 0, -1)
    tokens: list[int] = []
    parents: list[int] = []
    kids: dict[int, list[int]] = {}
    while frontier and len(tokens) < budget:
        _, _, depth, parent, token, group = heapq.heappop(frontier)
        node = len(tokens)
        tokens.append(int(token))
        parents.append(parent)
        kids.setdefault(parent, []).append(node)  # popped best first: each kids list is best first
        push_children(group, depth + 1, node)
    return _preorder(tokens, parents, kids)


def heaviest_line(candidates: list[tuple[list[int], float]], length: int) -> list[int]:
    """The first-child line of weighted_trie(candidates): at each depth the token that carries the most weight
    among the candidates that agree with the line so far (ties: the one seen first)."""
    sequences, weights = _merged(candidates)
    members, line = range(len(sequences)), []
    for depth in range(length):
        if len(members) == 1:  # one candidate left (the usual case after a few tokens): the rest is its own
            line.extend(int(token) for token in sequences[members[0]][depth:length])
            break
        groups = _next_tokens(members, sequences, weights, depth)
        if not groups:
            break
        best = max(groups, key=lambda token: groups[token][0])  # max keeps the first of equals
        line.append(int(best))
        members = groups[best][1]
    return line


def product_tree(candidates: list[tuple[list[int], list[float]]], budget: int) -> tuple[list[int], list[int]]:
    """Medusa's tree: position d has its own candidates (tokens, log probabilities, best first), the same
    whatever came before; a path's score is the sum of its log probabilities. Best-first search for the
    `budget` best paths' nodes."""
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    # (-score, rank, parent, depth)
    heap = [(-candidates[0][1][0], 0, -1, 0)] if candidates and candidates[0][0] else []
    while heap and len(tokens) < budget:
        negative, rank, parent, depth = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(candidates[depth][0][rank])
        parents.append(parent)
        scores.append(-negative)
        base = 0.0 if parent == -1 else scores[parent]
        if rank + 1 < len(candidates[depth][0]):  # the next sibling
            heapq.heappush(heap, (-(base + candidates[depth][1][rank + 1]), rank + 1, parent, depth))
        if depth + 1 < len(candidates) and candidates[depth + 1][0]:  # the first child
            heapq.heappush(heap, (-(-negative + candidates[depth + 1][1][0]), 0, node, depth + 1))
    return best_nodes(scores, parents, tokens, budget)
