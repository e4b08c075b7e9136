"""`adaptive` (proposers/adaptive.py): it drafts long where drafts pay, stops where they do not, tries its
lookup first, and on an EAGLE tree weighs the lookup's chain against the tree."""
import dataclasses

import pytest
import torch

from specviz import DecodeSettings
from specviz.api import make_proposer, run_once
from specviz.proposers import AdaptiveProposer, Draft, EagleProposer, Feedback, NgramProposer, PlainProposer

from random_drafters import random_eagle
from test_engine import PROMPT


@pytest.fixture(autouse=True, scope="module")
def warm(tiny_target):
    """adaptive decides from the step times it measures: the first runs of a process (lazy imports, the
    allocator's first blocks) would make a verify pass look dearer than it is, and this file runs first."""
    for method in ("plain", "ngram", "adaptive"):
        run_once(tiny_target, make_proposer(method, tiny_target), PROMPT, DecodeSettings(max_new_tokens=32, gamma=4))


class OracleProposer(NgramProposer):
    """Knows the plain greedy output in advance: always right, costs nothing."""
    def __init__(self, full_sequence):
        self.full = torch.tensor(full_sequence)

    def propose(self, tokens, gamma):
        start = tokens.shape[0]
        return Draft(self.full[start:start + gamma], None)


def forward_seconds(positions: int) -> float:
    return (1 + 0.05 * positions) * 1e-3


class FixedCostAdaptive(AdaptiveProposer):
    """adaptive told fixed costs in place of the times it measures (a forward over K positions: 1 ms + 0.05 ms a
    position; a model drafter: 0.2 ms a drafted token; a lookup: nothing), so that its choices depend on
    acceptance alone. The forward passes are real; their times on a loaded 2-core machine are not the subject
    (there, a verify pass over 9 positions once looked dearer than nine plain steps)."""

    def observe(self, feedback):
        by_model = self.last_was_tree or not (self.drafter_is_free or self.last_from_lookup or self.in_tree_mode())
        draft_seconds = 0.2e-3 * feedback.drafted if by_model else 0.0
        super().observe(dataclasses.replace(feedback, draft_seconds=draft_seconds,
                                            verify_seconds=forward_seconds(feedback.drafted + 1)))


def test_adaptive_drafts_long_when_it_pays(tiny_target):
    settings = DecodeSettings(max_new_tokens=60, gamma=8)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    oracle = FixedCostAdaptive(OracleProposer(PROMPT + plain.token_ids))
    result = run_once(tiny_target, oracle, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert result.metrics.mean_accepted_length > 3


def test_adaptive_stops_drafting_when_it_does_not_pay(tiny_target):
    """A drafter that is always wrong, fed step by step with fixed costs (a forward over K positions: 1 ms +
    0.05 ms a position), so that the decisions depend on acceptance and cost alone: measured on a loaded
    2-core machine, a forward of 2 positions sometimes cost less than one of 1, and drafting looked free."""
    truth = run_once(tiny_target, PlainProposer(), PROMPT, DecodeSettings(max_new_tokens=100)).token_ids

    class WrongDrafter(NgramProposer):
        def propose(self, tokens, gamma):
            draft = super().propose(tokens, gamma)
            draft.token_ids = (draft.token_ids + 1) % tiny_target.vocab_size  # never what the target wants
            return draft

    adaptive = AdaptiveProposer(WrongDrafter(min_ngram=1))
    tokens = torch.tensor(PROMPT)
    adaptive.reset(tokens, DecodeSettings(max_new_tokens=100, gamma=8), None)
    done = drafting_steps = 0
    while done < 90:
        draft = adaptive.propose(tokens, 8).token_ids.tolist()
        accepted = 0
        while accepted < len(draft) and draft[accepted] == truth[done + accepted]:
            accepted += 1
        new_ids = truth[done:done + accepted + 1]
        done += len(new_ids)
        tokens = torch.cat([tokens, torch.tensor(new_ids)])
        adaptive.observe(Feedback(tokens=tokens, drafted=len(draft), n_accepted=accepted, draft_seconds=0.0,
                                  verify_seconds=(1 + 0.05 * (len(draft) + 1)) * 1e-3, target_hidden=None,
                                  new_ids=new_ids))
        drafting_steps += len(draft) > 0
    # 16 of 90 steps as the adaptive method is now: its warm-up, learning each n-gram size's alpha, then probes
    assert drafting_steps < 0.25 * done, f"drafted in {drafting_steps} of {done} steps"


class CountingNgram(NgramProposer):
    """n-gram lookup that counts how often it is asked."""

    asked = 0

    def propose(self, tokens, gamma):
        self.asked += 1
        return super().propose(tokens, gamma)


class NeverFinds(NgramProposer):
    def propose(self, tokens, gamma):
        self.draft_key = 0
        return self.empty_draft(tokens.device)


def test_adaptive_tries_its_lookup_first_and_drafts_with_its_base_where_the_lookup_has_nothing(tiny_target):
    settings = DecodeSettings(max_new_tokens=60, gamma=8)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)

    base = CountingNgram(min_ngram=1)
    knows_all = FixedCostAdaptive(base, lookup=OracleProposer(PROMPT + plain.token_ids))
    assert knows_all.name == "adaptive(ngram+ngram)"
    result = run_once(tiny_target, knows_all, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert result.metrics.mean_accepted_length > 3
    assert base.asked == 0  # the lookup always had a draft worth verifying

    base = CountingNgram(min_ngram=1)
    finds_nothing = AdaptiveProposer(base, lookup=NeverFinds())
    result = run_once(tiny_target, finds_nothing, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert base.asked > 0


def test_adaptive_on_an_eagle_tree_weighs_the_lookup_chain_against_the_tree(tiny_target):
    """With a draft tree, adaptive on EAGLE picks each step's kind: a lookup that knows the output wins the
    steps once its alpha is learnt (also from the tree steps, where its draft was never verified); a lookup
    that finds nothing leaves every drafting step to the tree. Greedy output is plain output either way."""


    settings = DecodeSettings(max_new_tokens=60, gamma=6, tree=24, stop_at_eos=False)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    knows_all = FixedCostAdaptive(EagleProposer(random_eagle(tiny_target, seed=3)),
                                  lookup=OracleProposer(PROMPT + plain.token_ids))
    assert knows_all.drafts_trees
    result = run_once(tiny_target, knows_all, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    trees = [s for s in result.steps if s.tree_size]
    chains = [s for s in result.steps if not s.tree_size and s.gamma]
    assert trees and len(chains) > len(trees)  # the tree is measured first, then the lookup takes over
    assert all(s.n_accepted == s.gamma for s in chains)
    assert knows_all.alpha(("lookup", None)) > 0.9

    as_shipped = AdaptiveProposer(EagleProposer(random_eagle(tiny_target, seed=3)), lookup=NgramProposer())
    result = run_once(tiny_target, as_shipped, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert as_shipped.lookup.tree_budget() == 0 and as_shipped.base.tree_budget() == 24  # the lookup drafts chains
    assert all(s.gamma <= settings.gamma for s in result.steps if not s.tree_size)

    finds_nothing = AdaptiveProposer(EagleProposer(random_eagle(tiny_target, seed=3)), lookup=NeverFinds())
    result = run_once(tiny_target, finds_nothing, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert all(s.tree_size or s.gamma == 0 for s in result.steps)
    assert any(s.tree_size for s in result.steps)


def test_the_lookups_alpha_is_learnt_from_what_a_step_kept():
    from specviz.proposers.adaptive import matched_prefix

    assert matched_prefix([5, 6, 7], [5, 6, 9, 1]) == (2, True)  # wrong at its third token
    assert matched_prefix([5, 6, 7], [5, 6]) == (2, False)  # right as far as the step went
    assert matched_prefix([5, 6], [5, 6, 7]) == (2, False)
    assert matched_prefix([4], [5]) == (0, True)
