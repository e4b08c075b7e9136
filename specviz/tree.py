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

import numpy as np
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


def visibility(parents: list[int]) -> torch.Tensor:
    """[N + 1, N + 1] bool: row r (0 = root, i + 1 = node i) may attend to column c iff c is r or an ancestor.
    Each row as a Python integer bit mask, its parent's row plus itself (this runs on the host every tree step)."""
    count = len(parents) + 1
    rows = [1]  # the root sees itself
    for i, parent in enumerate(parents):
        rows.append(rows[parent + 1] | (1 << (i + 1)))
    width = (count + 7) // 8
    packed = np.frombuffer(b"".join(row.to_bytes(width, "little") for row in rows), dtype=np.uint8)
    bits = np.unpackbits(packed.reshape(count, width), axis=1, bitorder="little")[:, :count]
    return torch.from_numpy(bits.astype(bool))


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
    out_tokens, out_parents, new_index = [], [], {}
    stack = list(reversed(kids.get(-1, [])))
    while stack:  # preorder: every parent before its children
        node = stack.pop()
        new_index[node] = len(out_tokens)
        out_tokens.append(tokens[node])
        out_parents.append(-1 if parents[node] == -1 else new_index[parents[node]])
        stack.extend(reversed(kids.get(node, [])))
    return out_tokens, out_parents


def weighted_trie(candidates: list[tuple[list[int], float]], budget: int) -> tuple[list[int], list[int]]:
    """Merge weighted candidate continuations into a trie, score each node by the weight of the candidates
    that pass through it, and keep the `budget` best nodes (best_nodes)."""
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    index: dict[tuple[int, int], int] = {}
    for sequence, weight in candidates:
        parent = -1
        for token in sequence:
            node = index.get((parent, token))
            if node is None:
                node = len(tokens)
                index[(parent, token)] = node
                tokens.append(int(token))
                parents.append(parent)
                scores.append(0.0)
            scores[node] += weight
            parent = node
    return best_nodes(scores, parents, tokens, budget)


def product_tree(candidates: list[tuple[list[int], list[float]]], budget: int) -> tuple[list[int], list[int]]:
    """Medusa's tree: position d has its own candidates (tokens, log probabilities, best first), the same
    whatever came before; a path's score is the sum of its log probabilities. Best-first search for the
    `budget` best paths' nodes."""
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    heap = [(-candidates[0][1][0], 0, -1, 0)] if candidates and candidates[0][0] else []  # (-score, rank, parent, depth)
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
