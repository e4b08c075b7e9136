"""Where each node of a step's draft tree goes in a drawing: a pure function of the tree's parents, no UI.

Depth goes down (the root, the step's last accepted token, on top); leaves take one column each, left to right in
the order the drafter proposed them, and a parent sits over the middle of its children, so no two nodes overlap
and siblings read left to right as the verifier tried them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placed:
    node: int  # index in the step's tree
    column: float  # 0 .. columns - 1; a parent between its children
    depth: int  # 1 for a child of the root


def place(parents: list[int]) -> tuple[list[Placed], int]:
    """(each node's place, in node order; the number of leaf columns). parents[i]: node i's parent, -1 the root;
    a parent always comes before its children (as a draft tree's do)."""
    kids: dict[int, list[int]] = {}
    for node, parent in enumerate(parents):
        kids.setdefault(parent, []).append(node)
    column: dict[int, float] = {}
    depth: dict[int, int] = {}
    leaves = 0

    def visit(node: int, level: int) -> None:
        nonlocal leaves
        depth[node] = level
        below = kids.get(node, [])
        for child in below:
            visit(child, level + 1)
        if below:
            column[node] = (column[below[0]] + column[below[-1]]) / 2
        else:
            column[node] = leaves
            leaves += 1

    for top in kids.get(-1, []):  # depth is at most gamma (32): the recursion stays shallow
        visit(top, 1)
    return [Placed(node, column[node], depth[node]) for node in range(len(parents))], leaves
