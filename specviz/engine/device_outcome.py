"""A device loop's step as the host reads it back, one step behind the device: its log (the draft or tree, the
target's choices, how many were accepted; sampled, each draft's acceptance figures) as a StepOutcome, shown as the
host loop (step.py) shows its steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..rule import tree as trees
from .device_detail import StepDetail
from .step_records import tree_nodes


@dataclass
class StepOutcome:
    draft_ids: list[int]
    choices: list[int]  # the target's argmax after each draft prefix [len(draft_ids) + 1]; sampled: the next
    # token at n_accepted (the rest -1)
    n_accepted: int
    draft_ms: float
    verify_ms: float
    tree_size: int = 0  # a tree's nodes (draft_ids: the line shown, as the host loop's step.verify_tree shows it)
    detail: StepDetail | None = None  # with detail: the target's (and a model drafter's) figures along draft_ids
    accept_probs: list[float] | None = None  # sampled: each draft's acceptance probability (as verify_sampled's)
    uniforms: list[float] | None = None  # sampled: the draws compared with them (NaN where none was)
    doubted: bool = False  # the drafter ended its chain early, doubting its last token (settings.draft_stop)
    nodes: list = field(default_factory=list)  # a tree step's every candidate (records.TreeNode); [] for a chain

    @property
    def next_token(self) -> int:
        return self.choices[self.n_accepted]


def chain_outcome(log: list[int], figures: list[float] | None, gamma: int, draft_ms: float, verify_ms: float,
                  stops: bool) -> tuple[StepOutcome, range]:
    """A chain step's log (device_acceptance.advance's), and the line shown: its drafts. figures: a sampled
    step's (acceptance probabilities, then uniforms); stops: the drafter may end its chain early, doubting."""
    length, accepted = log[2 * gamma + 1], log[2 * gamma + 2]
    outcome = StepOutcome(draft_ids=log[:length], choices=log[gamma:gamma + length + 1], n_accepted=accepted,
                          draft_ms=draft_ms, verify_ms=verify_ms, doubted=stops and length < gamma)
    if figures is not None:
        outcome.accept_probs = figures[:length]
        outcome.uniforms = figures[gamma:gamma + length]
    return outcome, range(length)


def tree_outcome(log: list[int], figures: list[float] | None, budget: int, draft_ms: float, verify_ms: float
                 ) -> tuple[StepOutcome, list[int]]:
    """A tree step's log, shown as the host loop's step.verify_tree shows it: the accepted path, then the
    drafter's favourite line below where it stopped, with the target's choice before each (sampled: the
    acceptance probability of each node the walk tried, and where it tried none, p at its parent's row)."""
    count, accepted = log[3 * budget + 1], log[3 * budget + 2]
    tokens, parents = log[:count], log[budget:budget + count]
    walked = log[2 * budget:3 * budget + 1]
    if figures is None:
        walk = trees.walk_greedy(tokens, parents, walked[:count + 1])
        path = walk.path
        if len(path) != accepted:
            raise RuntimeError(f"the device accepted {accepted} tree nodes where the host's walk accepts {len(path)}")
    else:
        path = walked[:accepted]
    line = path + trees.first_child_chain(parents, path[-1] if path else -1)
    if figures is None:
        choices = [walked[row] for row in [0] + [node + 1 for node in line]]
    else:
        choices = [-1] * len(line) + [-1]
        choices[accepted] = walked[budget]
    outcome = StepOutcome(draft_ids=[tokens[node] for node in line], choices=choices, n_accepted=accepted,
                          draft_ms=draft_ms, verify_ms=verify_ms,
                          tree_size=0 if trees.is_chain(parents) else count)  # as the host loop counts it
    if figures is not None:
        accept, p_of, uniforms = figures[:budget], figures[budget:2 * budget], figures[2 * budget:]
        tried = tried_nodes(parents, path)
        outcome.accept_probs = [accept[node] if node in tried else p_of[node] for node in line]
        outcome.uniforms = [uniforms[node] if node in tried else float("nan") for node in line]
    if outcome.tree_size:  # greedy, the log holds no p of a node: the record's p is then None (not read)
        judged = {node for node, _, _ in walk.tried} if figures is None else tried
        outcome.nodes = tree_nodes(tokens, parents, path, judged, None if figures is None else p_of[:count])
    return outcome, line


def tried_nodes(parents: list[int], path: list[int]) -> set[int]:
    """The nodes a sampled walk tried: below the root and each node of the accepted path, the children in order
    up to the one accepted (every child where the walk stopped)."""
    kids = trees.children(parents)
    tried = set()
    for above, taken in zip([-1] + path, path + [None]):
        for child in kids[above + 1]:
            tried.add(child)
            if child == taken:
                break
    return tried
