"""EAGLE (proposers/eagle.py, eagle_tree.py): training's unrolled chain equals drafting with a cache, the
drafter's cache holds only true features, trees (eager and through graphs) draft what chains and plain
decoding say, and warm-up captures what a run replays."""
import pytest
import torch

from specviz import DecodeSettings
from specviz.api import run_once
from specviz.proposers import AdaptiveProposer, EagleProposer, NgramProposer, PlainProposer
from specviz.proposers.eagle_net import DraftCache
from specviz.train.losses import ttt_forward

from random_drafters import random_eagle
from test_engine import PROMPT


def test_training_chain_equals_drafting_with_a_cache(tiny_target):
    """ttt_forward's step k at position i must be exactly the k-th draft of a chain started at i - k."""
    drafter = random_eagle(tiny_target, seed=5)
    net, parts = drafter.net, drafter.parts
    torch.manual_seed(0)
    length, steps, hidden = 12, 4, net.config.hidden_size
    features = torch.randn(1, length, hidden)
    tokens = torch.randint(0, tiny_target.vocab_size, (length + 1,))
    embeds = parts.embed(tokens[1:]).unsqueeze(0)  # position i reads x_{i+1}
    cos, sin = parts.rotary(torch.arange(length))
    with torch.no_grad():
        outs = ttt_forward(net, features, embeds, cos, sin, steps)
        for start in range(0, length - steps + 1, 3):
            cache = DraftCache(len(net.layers))
            c, s = parts.rotary(torch.arange(start + 1))
            out = net(features[:, : start + 1], embeds[:, : start + 1], c, s, cache)[:, -1:]
            torch.testing.assert_close(out[0, 0], outs[0][0, start], rtol=1e-4, atol=1e-5)
            for k in range(1, steps):
                position = start + k
                c, s = parts.rotary(torch.tensor([position]))
                out = net(out, embeds[:, position: position + 1], c, s, cache)
                torch.testing.assert_close(out[0, 0], outs[k][0, position], rtol=1e-4, atol=1e-5)


def test_proposer_cache_holds_only_true_features(tiny_target):
    """After every step the drafter's cache equals a fresh pass over the target's own features."""
    from specviz import SpeculativeRun
    from specviz.runners.causal import CausalRunner

    proposer = EagleProposer(random_eagle(tiny_target, seed=2))
    run = SpeculativeRun(tiny_target, proposer, PROMPT, DecodeSettings(max_new_tokens=30, gamma=4))
    for _ in run:
        sequence = run.tokens
        cached = proposer.cache.length + proposer.pending.shape[0]
        assert cached == sequence.shape[0] - 1
        _, hidden = CausalRunner(tiny_target.model).forward(sequence[:-1])
        torch.testing.assert_close(torch.cat([proposer.pending]), hidden[proposer.cache.length:], rtol=1e-4, atol=1e-5)
        fresh = DraftCache(1)
        length = proposer.cache.length
        if length:
            parts = proposer.drafter.parts
            c, s = parts.rotary(torch.arange(length))
            proposer.drafter.net(hidden[:length].unsqueeze(0), parts.embed(sequence[1: length + 1]).unsqueeze(0), c, s,
                                 fresh)
            torch.testing.assert_close(proposer.cache.keys[0], fresh.keys[0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(proposer.cache.values[0], fresh.values[0], rtol=1e-4, atol=1e-5)


def tree_proposer(target, seed, gamma, tree):
    """An EAGLE proposer reset on PROMPT for a tree run, and the settings."""
    from specviz.runners.causal import CausalRunner

    settings = DecodeSettings(max_new_tokens=30, gamma=gamma, tree=tree)
    proposer = EagleProposer(random_eagle(target, seed=seed))
    tokens = torch.tensor(PROMPT)
    _, hidden = CausalRunner(target.model).forward(tokens[:-1])
    proposer.reset(tokens, settings, torch.Generator().manual_seed(0), hidden)
    return proposer, tokens, hidden


def test_eagle_tree_holds_the_chain_draft_as_its_first_line(tiny_target):
    """With every candidate kept (gamma 2: 8 + 64 nodes), the tree's best-first line is what chain drafting
    proposes, and the tree is laid out as tree.py wants (parents first, by depth)."""
    from specviz.rule.tree import check_tree, depths, first_child_chain

    for seed in (5, 6, 7):
        proposer, tokens, hidden = tree_proposer(tiny_target, seed, gamma=2, tree=72)
        draft = proposer.propose(tokens, 2)
        check_tree(draft.token_ids.tolist(), draft.parents)
        assert draft.size == 72 and max(depths(draft.parents)) == 2
        assert depths(draft.parents) == sorted(depths(draft.parents))
        chain_proposer = EagleProposer(proposer.drafter)
        chain_proposer.reset(tokens, DecodeSettings(gamma=2), torch.Generator(), hidden)
        chain = chain_proposer.propose(tokens, 2)
        line = first_child_chain(draft.parents, -1)
        assert [draft.token_ids[i].item() for i in line] == chain.token_ids.tolist()


@pytest.mark.parametrize("gamma, tree", [(1, 6), (3, 12), (6, 40)])
def test_eagle_tree_greedy_equals_plain(tiny_target, gamma, tree):
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma, tree=tree)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, EagleProposer(random_eagle(tiny_target, seed=3)), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert all(step.tree_size > 1 for step in result.steps[:-1])


@pytest.mark.parametrize("adaptive", [False, True])
def test_eagle_tree_cache_holds_only_true_features(tiny_target, adaptive):
    """After every tree step the drafter's static cache holds, in its first slots, what a fresh pass over
    the target's own features gives (the tree's scratch slots are overwritten, never kept); also under
    adaptive, whose lookup and plain steps leave positions for the drafter to catch up on."""
    from specviz import SpeculativeRun
    from specviz.runners.causal import CausalRunner

    proposer = EagleProposer(random_eagle(tiny_target, seed=2))
    runs = AdaptiveProposer(proposer, lookup=NgramProposer()) if adaptive else proposer
    run = SpeculativeRun(tiny_target, runs, PROMPT, DecodeSettings(max_new_tokens=30, gamma=4, tree=16))
    steps = 0
    for _ in run:
        steps += 1
        sequence, trees = run.tokens, proposer.trees
        assert trees.length + proposer.pending.shape[0] == sequence.shape[0] - 1
        _, hidden = CausalRunner(tiny_target.model).forward(sequence[:-1])
        fresh = DraftCache(1)
        parts = proposer.drafter.parts
        c, s = parts.rotary(torch.arange(trees.length))
        proposer.drafter.net(hidden[:trees.length].unsqueeze(0),
                             parts.embed(sequence[1: trees.length + 1]).unsqueeze(0),
                             c, s, fresh)
        torch.testing.assert_close(trees.space.keys[0, :, : trees.length], fresh.keys[0][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(trees.space.values[0, :, : trees.length], fresh.values[0][0], rtol=1e-4, atol=1e-5)
    assert steps > 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_eagle_tree_graphs_draft_what_eager_drafting_does(tiny_target, monkeypatch):
    from specviz.models.loading import LoadedModel
    from specviz.models.testing import perturbed_copy

    target = LoadedModel(name="tiny-cuda", model=perturbed_copy(tiny_target, 0.0).model.cuda(), tokenizer=None,
                         device=torch.device("cuda"), dtype=torch.float32)
    drafter = random_eagle(target, seed=3)
    drafter.net.cuda()
    settings = DecodeSettings(max_new_tokens=60, gamma=5, tree=31)
    plain = run_once(target, PlainProposer(), PROMPT, settings)
    # the host loop's tree drafting (TreeDrafting's graphs); the device loop drafts EAGLE's trees inside its own
    # step graph, which tests/test_device_loop.py compares with plain
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "0")
    graphed = run_once(target, EagleProposer(drafter), PROMPT, settings)
    monkeypatch.setenv("SPECVIZ_GRAPHS", "0")
    eager = run_once(target, EagleProposer(drafter), PROMPT, settings)
    assert graphed.token_ids == eager.token_ids == plain.token_ids
    assert drafter.tree_workspaces and any(space.graphs for spaces in drafter.tree_workspaces.values()
                                           for space in spaces)
    same = sum([p.token_id for p in a.positions] == [p.token_id for p in b.positions]
               for a, b in zip(graphed.steps, eager.steps))
    assert same >= 0.9 * len(eager.steps)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_catch_up_through_a_graph_writes_what_eager_feeding_does(tiny_target):
    """The drafter catching up on many positions (a prompt; adaptive's steps without a tree) replays one graph
    of CATCH_UP_ROWS rows at a time: its cache equals eager feeding, and adaptive on it gives plain output."""
    from specviz.models.loading import LoadedModel
    from specviz.proposers.eagle_tree import CATCH_UP_ROWS, TreeDrafting
    from specviz.models.testing import perturbed_copy

    target = LoadedModel(name="tiny-cuda-catch-up", model=perturbed_copy(tiny_target, 0.0).model.cuda(),
                         tokenizer=None, device=torch.device("cuda"), dtype=torch.float32)
    drafter = random_eagle(target, seed=6)
    drafter.net.cuda()
    torch.manual_seed(0)
    count = 2 * CATCH_UP_ROWS + 22
    features = torch.randn(count, drafter.net.config.hidden_size, device="cuda")
    token_ids = torch.randint(0, target.vocab_size, (count,), device="cuda")
    graphed, eager = TreeDrafting(drafter, 512, 5), TreeDrafting(drafter, 512, 5)
    assert graphed.use_graphs and graphed.space is not eager.space
    graphed.catch_up(features[:3], token_ids[:3])
    graphed.catch_up(features[3:], token_ids[3:])  # three replays, the last one part padding
    eager.prefill(features, token_ids)
    assert graphed.length == eager.length == count
    torch.testing.assert_close(graphed.space.keys[:, :, :count], eager.space.keys[:, :, :count], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(graphed.space.values[:, :, :count], eager.space.values[:, :, :count], rtol=1e-4,
                               atol=1e-5)
    graphed.release(), eager.release()

    settings = DecodeSettings(max_new_tokens=60, gamma=5, tree=31, stop_at_eos=False)
    plain = run_once(target, PlainProposer(), PROMPT, settings)
    adaptive = run_once(target, AdaptiveProposer(EagleProposer(drafter), lookup=NgramProposer()), PROMPT, settings)
    assert adaptive.token_ids == plain.token_ids


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_warm_up_captures_the_tree_drafting_graph_a_run_replays(tiny_target, monkeypatch):
    """api.warm_up captures (and compiles) EAGLE's tree-drafting graph: the run after it captures none, so no
    compile lands inside a timed run or the app's first steps."""
    from specviz.api import warm_up
    from specviz.models.loading import LoadedModel
    from specviz.proposers.eagle_tree import TreeDrafting
    from specviz.models.testing import perturbed_copy

    target = LoadedModel(name="tiny-cuda-warm", model=perturbed_copy(tiny_target, 0.0).model.cuda(), tokenizer=None,
                         device=torch.device("cuda"), dtype=torch.float32)
    drafter = random_eagle(target, seed=4)
    drafter.net.cuda()
    settings = DecodeSettings(max_new_tokens=40, gamma=4, tree=16)
    warm_up(target, settings.gamma + 1, len(PROMPT) + settings.max_new_tokens + settings.tree + 1,
            [EagleProposer(drafter)], tree=settings.tree)
    captures = []
    capture = TreeDrafting._capture
    monkeypatch.setattr(TreeDrafting, "_capture", lambda self, *args: captures.append(args) or capture(self, *args))
    run_once(target, EagleProposer(drafter), PROMPT, settings)
    assert captures == []


def test_warm_up_of_an_eagle_tree_proposer_runs_on_the_cpu(tiny_target):
    from specviz.api import warm_up

    proposer = AdaptiveProposer(EagleProposer(random_eagle(tiny_target, seed=5)))
    warm_up(tiny_target, 5, 80, [proposer], tree=16)  # nothing to capture here: it must not fail
    settings = DecodeSettings(max_new_tokens=30, gamma=4, tree=16)
    assert run_once(tiny_target, proposer, PROMPT, settings).token_ids == run_once(
        tiny_target, PlainProposer(), PROMPT, settings).token_ids


def test_eagle_tree_drafts_at_the_runs_depth_up_to_the_last_step(tiny_target, monkeypatch):
    """Near max_new_tokens the engine asks for fewer drafts: the tree is still drafted at the run's depth (one
    graph, one compile on a GPU) and cut, and the output is still plain greedy output."""
    from specviz.proposers.eagle_tree import TreeDrafting

    depths_asked = []
    step = TreeDrafting.step

    def recording(self, features, token_ids, gamma, width, budget):
        depths_asked.append(gamma)
        return step(self, features, token_ids, gamma, width, budget)

    monkeypatch.setattr(TreeDrafting, "step", recording)
    settings = DecodeSettings(max_new_tokens=23, gamma=5, tree=31, stop_at_eos=False)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, EagleProposer(random_eagle(tiny_target, seed=2)), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert set(depths_asked) == {5}
    room = [settings.max_new_tokens - (s.total_emitted - s.emitted) for s in result.steps]  # before each step
    assert any(left < 5 for left in room)  # the run did reach steps with less room than gamma
    for step_record, left in zip(result.steps, room):
        assert len(step_record.positions) <= min(5, left)  # the line shown: no deeper than the room left
