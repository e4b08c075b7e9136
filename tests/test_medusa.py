"""Medusa (proposers/medusa.py): its trees hold each head's likeliest tokens, and large trees give plain
greedy output."""
import torch

from specviz import DecodeSettings
from specviz.api import run_once
from specviz.proposers import MedusaProposer, PlainProposer

from random_drafters import random_medusa
from test_engine import PROMPT


def test_medusa_tree_takes_each_heads_likeliest_tokens_beyond_the_tenth(tiny_target):
    """A tree of N nodes from one head holds that head's N likeliest tokens (they were cut at 10 once), and a
    deeper tree's best-first order is Medusa's: by the sum of the heads' log probabilities."""
    from specviz.runners.causal import CausalRunner

    drafter = random_medusa(tiny_target, heads=2, seed=4)
    proposer = MedusaProposer(drafter)
    tokens = torch.tensor(PROMPT)
    _, hidden = CausalRunner(tiny_target.model).forward(tokens[:-1])
    proposer.reset(tokens, DecodeSettings(gamma=1, tree=30), torch.Generator(), hidden)
    draft = proposer.propose(tokens, 1)
    with torch.inference_mode():
        ids, _ = drafter.top_tokens(hidden[-1], 1, 30)
    assert draft.token_ids.tolist() == ids[0].tolist() and set(draft.parents) == {-1}
    proposer.reset(tokens, DecodeSettings(gamma=2, tree=60), torch.Generator(), hidden)
    draft = proposer.propose(tokens, 2)
    with torch.inference_mode():
        ids, values = drafter.top_tokens(hidden[-1], 2, 60)
    score = {int(t): float(v) for t, v in zip(ids[0], values[0])}
    second = {int(t): float(v) for t, v in zip(ids[1], values[1])}
    nodes = draft.token_ids.tolist()
    scores = [score[t] if p == -1 else score[nodes[p]] + second[t] for t, p in zip(nodes, draft.parents)]
    assert len(nodes) == 60 and sum(p == -1 for p in draft.parents) > 10
    cutoff = min(scores)  # every path left out scores no better than the worst one kept
    kept = {(nodes[p] if p >= 0 else None, t) for t, p in zip(nodes, draft.parents)}
    assert all(score[a] + second[b] <= cutoff + 1e-5 for a in score for b in second if (a, b) not in kept
               and (None, a) in kept)


def test_medusa_trees_past_127_nodes_give_plain_greedy_output(tiny_target):
    """Large trees (up to settings.MAX_TREE; replays put Medusa's best tau there): verified exactly, and really
    that large (three heads of 100 candidates each have far more than 300 paths)."""
    settings = DecodeSettings(max_new_tokens=30, gamma=3, tree=300)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, MedusaProposer(random_medusa(tiny_target, seed=2)), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert all(step.tree_size == 300 for step in result.steps[1:-1])


def paths(tokens, parents) -> set[tuple]:
    """A tree's paths from the root, each node's as a tuple of tokens: what a tree holds whatever its layout."""
    out = []
    for token, parent in zip(tokens, parents):
        out.append((out[parent] if parent >= 0 else ()) + (token,))
    return set(out)


def test_the_device_tree_holds_product_trees_nodes_parents_first():
    """medusa_device.product_tree_nodes against tree.product_tree on random candidates (4 depths of 12, distinct
    log probabilities): the same paths at every budget, each parent before its children. Control: a budget one
    smaller leaves out a path the other holds."""
    from specviz.proposers.medusa_device import product_tree_nodes
    from specviz.rule.tree import product_tree

    generator = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.randperm(50, generator=generator)[:12] for _ in range(4)])
    values = torch.rand(4, 12, generator=generator).log().sort(descending=True).values
    candidates = list(zip(ids.tolist(), values.tolist()))
    for budget in (1, 5, 12, 40, 200):
        tokens, parents = product_tree_nodes(ids, values, budget)
        assert all(p < i for i, p in enumerate(parents.tolist()))
        assert paths(tokens.tolist(), parents.tolist()) == paths(*product_tree(candidates, budget))
    tokens, parents = product_tree_nodes(ids, values, 39)
    assert paths(tokens.tolist(), parents.tolist()) < paths(*product_tree(candidates, 40))
