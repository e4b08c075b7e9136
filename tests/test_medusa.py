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
    from specviz.runner import CausalRunner

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
    assert all(score[a] + second[b] <= cutoff + 1e-5 for a in score for b in second if (a, b) not in kept and (None, a) in kept)


def test_medusa_trees_past_127_nodes_give_plain_greedy_output(tiny_target):
    """Large trees (up to settings.MAX_TREE; replays put Medusa's best tau there): verified exactly, and really
    that large (three heads of 100 candidates each have far more than 300 paths)."""
    settings = DecodeSettings(max_new_tokens=30, gamma=3, tree=300)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, MedusaProposer(random_medusa(tiny_target, seed=2)), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert all(step.tree_size == 300 for step in result.steps[1:-1])
