"""Drafters on the target's hidden states (Medusa heads, the EAGLE layer) on tiny random models: greedy
output equal to plain, draft tokens drawn from the q they report, the draft head's two-stage top-k."""
import pytest
import torch

from specviz import DecodeSettings
from specviz.api import run_once
from specviz.proposers import EagleProposer, MedusaProposer, PlainProposer
from specviz.proposers.draft_head import DraftHead

from random_drafters import random_eagle, random_medusa
from stats import assert_same_distribution
from test_engine import PROMPT


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("method", ["eagle", "medusa"])
def test_greedy_equals_plain(tiny_target, method, gamma):
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    subset = torch.arange(0, tiny_target.vocab_size, 2)  # a draft vocabulary: only even ids are ever drafted
    drafter = random_eagle(tiny_target, token_ids=subset) if method == "eagle" else random_medusa(tiny_target,
                                                                                                  token_ids=subset)
    proposer = EagleProposer(drafter) if method == "eagle" else MedusaProposer(drafter)
    result = run_once(tiny_target, proposer, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert result.metrics.drafted > 0
    drafted = [p.token_id for s in result.steps for p in s.positions]
    assert all(t % 2 == 0 for t in drafted)
    if method == "medusa":
        assert max(s.gamma for s in result.steps) == min(gamma, 3)  # never more drafts than heads


def test_one_token_prompt_drafts_once_a_feature_exists(tiny_target):
    settings = DecodeSettings(max_new_tokens=12, gamma=3)
    for proposer in (EagleProposer(random_eagle(tiny_target)), MedusaProposer(random_medusa(tiny_target))):
        result = run_once(tiny_target, proposer, [5], settings)
        assert result.token_ids == run_once(tiny_target, PlainProposer(), [5], settings).token_ids
        assert result.steps[0].gamma == 0 and result.steps[1].gamma > 0


@pytest.mark.parametrize("method", ["eagle", "medusa"])
def test_draft_tokens_are_drawn_from_the_q_they_report(tiny_target, method):
    """q must be the distribution the draft token was drawn from, after the run's warping (here top-k)."""
    from collections import Counter

    from specviz.runners.causal import CausalRunner
    from specviz.rule.sampling import warp_probs

    subset = torch.arange(0, tiny_target.vocab_size, 3)
    if method == "eagle":
        proposer = EagleProposer(random_eagle(tiny_target, seed=8, token_ids=subset, scale=0.15))
    else:
        proposer = MedusaProposer(random_medusa(tiny_target, seed=8, token_ids=subset))
    settings = DecodeSettings(temperature=0.9, top_k=5, seed=0)
    tokens = torch.tensor(PROMPT)
    _, hidden = CausalRunner(tiny_target.model).forward(tokens[:-1])
    generator = torch.Generator().manual_seed(0)
    proposer.reset(tokens, settings, generator, hidden)
    counts, q = Counter(), None
    draws = 2000
    for _ in range(draws):
        draft = proposer.propose(tokens, 1)
        counts[int(draft.token_ids[0])] += 1
        q = draft.probs[0] if q is None else q
        torch.testing.assert_close(draft.probs[0], warp_probs(draft.logits[0], settings))
    assert (q > 0).sum() <= 5 and all(int(t) in subset.tolist() for t in counts)
    assert_same_distribution(counts, {i: float(p) for i, p in enumerate(q) if p > 0}, draws)


def test_top_k_in_two_stages_equals_topk():
    from specviz.proposers.draft_head import top_k

    torch.manual_seed(0)
    x = torch.randn(3, 8, 16384)
    for k in (1, 8, 10):
        values, indices = top_k(x, k, two_stage=True)
        expected = x.topk(k, dim=-1)
        assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
    head = DraftHead(torch.randn(4096, 16), vocab_size=4096)
    features = torch.randn(5, 16)
    ids, log_probs = head.top_tokens(features, 6)
    expected = torch.log_softmax(head.sub_logits(features), -1).topk(6)
    assert torch.equal(ids, expected.indices)
    torch.testing.assert_close(log_probs, expected.values)
