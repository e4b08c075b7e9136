"""Draft trees: the pure tree functions, and tree verification through the engine on tiny random models
(greedy equality with plain decoding, caches equal to a fresh prefill after tree steps, the exact sampling
distribution, and a test that fails for a wrong tree verifier)."""
import random

import pytest
import torch

from specviz import DecodeSettings, SpeculativeRun
from specviz.rule import tree as trees
from specviz.api import make_proposer, run_once
from specviz.proposers import Draft, NgramProposer, PlainProposer
from specviz.runners.causal import CausalRunner, layer_keys_values

from stats import assert_same_distribution
from test_engine import OUTPUTS, PROMPT, RUNS, SAMPLE_PROMPT, exact_joint

# tree.py ----------------------------------------------------------------------------------------------

BUSHY = [-1, 0, 0, -1, 3, 4]  # root -> 0 -> {1, 2}; root -> 3 -> 4 -> 5


def test_depths_children_and_visibility():
    assert trees.depths(BUSHY) == [1, 2, 2, 1, 2, 3]
    assert trees.children(BUSHY) == [[0, 3], [1, 2], [], [], [4], [5], []]
    visible = trees.visibility(BUSHY)
    expected_rows = {0: [0], 1: [0, 1], 2: [0, 1, 2], 3: [0, 1, 3], 4: [0, 4], 5: [0, 4, 5], 6: [0, 4, 5, 6]}
    for row, columns in expected_rows.items():
        assert visible[row].nonzero().flatten().tolist() == columns
    assert trees.is_chain([-1, 0, 1]) and not trees.is_chain(BUSHY)
    assert trees.first_child_chain(BUSHY, -1) == [0, 1]
    with pytest.raises(ValueError, match="parents must come before"):
        trees.check_tree([1, 2], [1, -1])


def test_visibility_of_large_random_trees_is_each_rows_ancestor_line():
    """Trees past 8 and 64 nodes (the bit masks span several bytes), up to the largest allowed, against walking
    up the parents."""
    from specviz.settings import MAX_TREE

    rng = random.Random(0)
    for count in (0, 7, 8, 9, 63, 64, 127, 300, MAX_TREE):
        parents = [rng.randrange(-1, i) if rng.random() < 0.4 else i - 1 for i in range(count)]
        visible = trees.visibility(parents)
        assert visible.shape == (count + 1, count + 1) and visible.dtype == torch.bool
        for node in range(count):
            line, at = {0, node + 1}, parents[node]
            while at >= 0:
                line.add(at + 1)
                at = parents[at]
            assert set(visible[node + 1].nonzero().flatten().tolist()) == line
        assert visible[0].nonzero().flatten().tolist() == [0]


def full_trie(candidates, budget):
    """The reference weighted_trie: the whole trie, candidate by candidate, then the budget best nodes."""
    tokens, parents, scores, index = [], [], [], {}
    for sequence, weight in candidates:
        parent = -1
        for token in sequence:
            node = index.get((parent, token))
            if node is None:
                node = index[(parent, token)] = len(tokens)
                tokens.append(token)
                parents.append(parent)
                scores.append(0.0)
            scores[node] += weight
            parent = node
    return trees.best_nodes(scores, parents, tokens, budget)


def test_best_first_trie_equals_the_whole_trie_cut_to_its_budget():
    """weighted_trie expands only the nodes it keeps; the tree must be the one the whole trie gives, ties and
    duplicate candidates included, and heaviest_line its first-child line."""
    rng = random.Random(2)
    for _ in range(2000):
        candidates = [([rng.randrange(4) for _ in range(rng.randrange(0, 7))], rng.choice([0.01, 0.5, 1, 1, 2, 4]))
                      for _ in range(rng.randrange(0, 14))]
        for budget in (1, 3, 10, 63):
            assert trees.weighted_trie(candidates, budget) == full_trie(candidates, budget)
        tokens, parents = full_trie(candidates, 10_000)
        assert trees.heaviest_line(candidates, 5) == [tokens[n] for n in trees.first_child_chain(parents, -1)][:5]


def test_visibility_words_unpack_to_the_visibility():
    """The packed rows that a graph's input carries (two words a row past 64 positions, the top bit set in
    the first word of a 64-position row) unpack on the device side to exactly visibility()."""
    rng = random.Random(1)
    for count in (0, 1, 62, 63, 64, 100, 127, 511, 1023):
        parents = [rng.randrange(-1, i) if rng.random() < 0.5 else i - 1 for i in range(count)]
        words = trees.visibility_words(parents)
        assert words.numel() == (count + 1) * -(-(count + 1) // 64)
        assert torch.equal(trees.unpack_visibility(words, count + 1), trees.visibility(parents))
        # visibility() is itself this unpacking: the bits are also checked against the host's own masks
        masks = trees.ancestor_masks(parents)
        expected = torch.tensor([[bool(row >> c & 1) for c in range(count + 1)] for row in masks], dtype=torch.bool)
        assert torch.equal(trees.unpack_visibility(words, count + 1), expected.reshape(count + 1, count + 1))


def test_greedy_walk_follows_the_targets_argmax_through_siblings():
    tokens = [10, 11, 12, 13, 14, 15]
    # the target wants 13 after the root (the second child), then 14, then 99 (not drafted)
    choices = [13, 0, 0, 0, 14, 99, 0]
    walk = trees.walk_greedy(tokens, BUSHY, choices)
    assert walk.path == [3, 4] and walk.next_token == 99
    assert [node for node, _, _ in walk.tried] == [0, 3, 4, 5]
    walk = trees.walk_greedy(tokens, BUSHY, [7, 0, 0, 0, 0, 0, 0])
    assert walk.path == [] and walk.next_token == 7


def test_trie_merges_prefixes_and_keeps_the_best_nodes():
    # shared prefixes once; equal weights: ties go to the earlier candidate
    tokens, parents = trees.weighted_trie([([1, 2, 3], 1), ([1, 2, 4], 1), ([5], 1)], budget=4)
    assert tokens == [1, 2, 3, 4] and parents == [-1, 0, 1, 1]
    # node scores: 1: 21, 2: 20, 3: 16, then 5, 6 and 4 with 4 each (ties: the earlier candidate), 7: 1
    tokens, parents = trees.weighted_trie([([1, 2, 3], 16), ([5, 6], 4), ([1, 2, 4], 4), ([1, 7], 1)], budget=5)
    assert list(zip(tokens, parents)) == [(1, -1), (2, 0), (3, 1), (5, -1), (6, 3)]
    # Medusa's product tree: scores add along the path; the best 4 of (5|6|7) x (8|9)
    tokens, parents = trees.product_tree([([5, 6, 7], [-0.1, -1.0, -2.0]), ([8, 9], [-0.2, -0.5])], budget=4)
    assert list(zip(tokens, parents)) == [(5, -1), (8, 0), (9, 0), (6, -1)]


@pytest.mark.parametrize("budget", [1, 3, 7, 20])
def test_best_nodes_is_a_closed_tree_in_order(budget):
    generator = torch.Generator().manual_seed(budget)
    parents = [-1, -1, 0, 0, 1, 2, 2, 4, 5, 5, 8]
    scores = []
    for parent in parents:  # a child never scores above its parent
        scores.append((0.0 if parent < 0 else scores[parent]) - float(torch.rand(1, generator=generator)))
    tokens, out_parents = trees.best_nodes(scores, parents, list(range(100, 111)), budget)
    assert len(tokens) == min(budget, 11)
    trees.check_tree(tokens, out_parents)


# The engine with trees ----------------------------------------------------------------------------------

class FixedTree(NgramProposer):
    """Proposes the same bushy tree every step (tokens chosen in advance, whatever the context): a
    deterministic drafter, so verifying its nodes as one-hot candidates is exact."""

    name = "fixed-tree"

    def __init__(self, tokens=(0, 1, 2, 3, 4, 5), parents=(-1, 0, -1, 1, 2, -1)):
        super().__init__()
        self.nodes, self.tree_parents = list(tokens), list(parents)

    def propose(self, tokens, gamma):
        keep = [i for i, d in enumerate(trees.depths(self.tree_parents)) if d <= gamma][: self.tree_budget()]
        return Draft(torch.tensor([self.nodes[i] for i in keep]), None, None, [self.tree_parents[i] for i in keep])


class OracleTree(NgramProposer):
    """Knows the plain greedy output; hides the right token as the last of three siblings at each depth."""

    def __init__(self, full_sequence, vocab_size):
        super().__init__()
        self.full, self.vocab = list(full_sequence), vocab_size

    def propose(self, tokens, gamma):
        start = tokens.shape[0]
        right = self.full[start:start + gamma]
        node_ids, parents, parent = [], [], -1
        for token in right:
            wrong = [(token + 1) % self.vocab, (token + 2) % self.vocab]
            node_ids += [*wrong, token]
            parents += [parent, parent, parent]
            parent = len(node_ids) - 1
        return Draft(torch.tensor(node_ids, dtype=torch.long), None, None, parents)


@pytest.mark.parametrize("tree", [4, 16])
@pytest.mark.parametrize("gamma", [2, 5])
def test_greedy_with_a_tree_equals_plain(tiny_target, tree, gamma):
    settings = DecodeSettings(max_new_tokens=48, gamma=gamma, tree=tree)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, make_proposer("ngram", tiny_target), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    if tree == 16:
        assert any(step.tree_size > 1 for step in result.steps)  # it really drafted trees
    fixed = run_once(tiny_target, FixedTree(), PROMPT, settings)
    assert fixed.token_ids == plain.token_ids
    assert all(step.tree_size > 1 for step in fixed.steps)


def test_the_right_token_is_found_among_siblings(tiny_target):
    settings = DecodeSettings(max_new_tokens=40, gamma=4, tree=12)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, OracleTree(PROMPT + plain.token_ids, tiny_target.vocab_size), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert result.metrics.mean_accepted_length > 4  # every depth accepted: 4 drafts and the bonus a step
    shown = result.steps[0]
    assert shown.n_accepted == 4 and shown.tree_size == 12 and len(shown.positions) == 4


def test_caches_equal_a_fresh_prefill_after_tree_steps(tiny_target):
    run = SpeculativeRun(tiny_target, FixedTree(), PROMPT, DecodeSettings(max_new_tokens=40, gamma=3, tree=6))
    moved = 0
    for step in run:
        moved += step.n_accepted > 0
        assert run.runner.length == run.tokens.shape[0] - 1
        fresh = CausalRunner(tiny_target.model)
        fresh.forward(run.tokens[:-1])
        for (k, v), (k0, v0) in zip(run.runner.layer_keys_values(), layer_keys_values(fresh.cache)):
            torch.testing.assert_close(k, k0, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(v, v0, rtol=1e-5, atol=1e-5)
    assert moved >= 1


def test_methods_without_trees_draft_chains_with_a_warning(tiny_target, tiny_drafter):
    from specviz.methods import names

    settings = DecodeSettings(max_new_tokens=16, gamma=3, tree=8)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    for method in ("draft", "early-exit", "adaptive"):
        proposer = make_proposer(method, tiny_target, tiny_drafter)
        assert not proposer.drafts_trees and method not in names(drafts_trees=True)
        with pytest.warns(UserWarning, match="drafts chains"):
            result = run_once(tiny_target, proposer, PROMPT, settings)
        assert result.token_ids == plain.token_ids
    assert all(make_proposer(m, tiny_target).drafts_trees for m in ("ngram",))


def test_transformers_cache_drafts_chains_with_a_warning(tiny_target, monkeypatch):
    monkeypatch.setenv("SPECVIZ_FAST", "0")
    settings = DecodeSettings(max_new_tokens=24, gamma=3, tree=8)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    with pytest.warns(UserWarning, match="cannot verify draft trees"):
        result = run_once(tiny_target, make_proposer("ngram", tiny_target), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert all(step.tree_size == 0 for step in result.steps)


# Sampling with a tree has exactly the target's distribution ------------------------------------------------

def tree_samples(target, runs=RUNS):
    from collections import Counter

    counts = Counter()
    for seed in range(runs):
        settings = DecodeSettings(max_new_tokens=OUTPUTS, gamma=2, tree=6, temperature=1.0, seed=seed,
                                  stop_at_eos=False)
        run = SpeculativeRun(target, FixedTree(), SAMPLE_PROMPT, settings)
        for _ in run:
            pass
        counts[tuple(run.result.token_ids)] += 1
    return counts


@pytest.fixture(scope="module")
def six_token_target():
    from specviz.models.testing import tiny_causal_lm

    return tiny_causal_lm(vocab_size=6, seed=10, sharpness=1.2)


def test_tree_sampling_has_the_target_distribution(six_token_target):
    counts = tree_samples(six_token_target)
    assert_same_distribution(counts, exact_joint(six_token_target, SAMPLE_PROMPT, OUTPUTS), RUNS)


def test_tree_distribution_test_fails_without_the_residual(six_token_target, monkeypatch):
    """A verifier that, after a sibling is rejected, tries the next one against the unchanged p (no
    residual): it over-produces the drafted tokens, and the test must see it."""
    def wrong_walk(tokens, parents, probs, generator):
        kids = trees.children(parents)
        node, path = -1, []
        while True:
            p = probs[node + 1]
            for child in kids[node + 1]:
                if float(torch.rand(1, generator=generator)) < float(p[tokens[child]]):
                    path.append(child)
                    node = child
                    break
            else:
                from specviz.rule.sampling import draw
                return trees.TreeWalk(path, int(draw(p, generator)), [], p)

    monkeypatch.setattr(trees, "walk_sampled", wrong_walk)
    counts = tree_samples(six_token_target)
    with pytest.raises(AssertionError, match="not the target's distribution"):
        assert_same_distribution(counts, exact_joint(six_token_target, SAMPLE_PROMPT, OUTPUTS), RUNS)


def test_a_draft_heads_top_tokens_are_those_of_its_full_logits():
    from specviz.proposers.draft_head import DraftHead

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=generator)
    features = torch.randn(3, 8, generator=generator)
    for scored in (None, torch.tensor([3, 7, 9, 20, 31, 40, 41, 49])):
        head = DraftHead(weight, 50, scored)
        ids, values = head.top_tokens(features, 4)
        top = torch.log_softmax(head.full_logits(features), -1).topk(4)
        assert torch.equal(ids, top.indices)
        torch.testing.assert_close(values, top.values)
