"""Medusa and EAGLE drafters on tiny random models: exact greedy and sampling through the engine, training's
unrolled chain equal to real drafting, the published file formats (written here by the test), and heads made
for another target refused."""
import json

import pytest
import torch

from specviz import DecodeSettings, DrafterMismatchError, ModelLoadError
from specviz.api import make_proposer, run_once
from specviz.proposers import AdaptiveProposer, EagleProposer, MedusaProposer, NgramProposer, PlainProposer
from specviz.proposers.draft_head import DraftHead, TargetParts
from specviz.proposers.eagle import DraftCache, EagleConfig, EagleDrafter, EagleNet
from specviz.proposers.medusa import MedusaDrafter, MedusaHeads
from specviz.train.losses import ttt_forward

from stats import assert_same_distribution
from test_engine_tiny import PROMPT


def random_eagle(target, seed=0, token_ids=None, scale=0.3) -> EagleDrafter:
    torch.manual_seed(seed)
    config = EagleConfig.like_target(target.model.config)
    net = EagleNet(config).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * scale)  # make the random drafter opinionated
    parts = TargetParts(target.model, config.head_dim)
    return EagleDrafter(net, parts, DraftHead.from_target(parts, token_ids), "random")


def random_medusa(target, heads=3, seed=0, token_ids=None) -> MedusaDrafter:
    torch.manual_seed(seed)
    hidden = target.model.config.hidden_size
    module = MedusaHeads(hidden, heads).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    parts = TargetParts(target.model, hidden // target.model.config.num_attention_heads)
    return MedusaDrafter(module, [DraftHead.from_target(parts, token_ids)], "random")


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("method", ["eagle", "medusa"])
def test_greedy_equals_plain(tiny_target, method, gamma):
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    subset = torch.arange(0, tiny_target.vocab_size, 2)  # a draft vocabulary: only even ids are ever drafted
    drafter = random_eagle(tiny_target, token_ids=subset) if method == "eagle" else random_medusa(tiny_target, token_ids=subset)
    proposer = EagleProposer(drafter) if method == "eagle" else MedusaProposer(drafter)
    result = run_once(tiny_target, proposer, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert result.metrics.drafted > 0
    drafted = [p.token_id for s in result.steps for p in s.positions]
    assert all(t % 2 == 0 for t in drafted)
    if method == "medusa":
        assert max(s.gamma for s in result.steps) == min(gamma, 3)  # never more drafts than heads


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

    from specviz.runner import CausalRunner
    from specviz.sampling import warp_probs

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
    from specviz.runner import CausalRunner

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
            proposer.drafter.net(hidden[:length].unsqueeze(0), parts.embed(sequence[1: length + 1]).unsqueeze(0), c, s, fresh)
            torch.testing.assert_close(proposer.cache.keys[0], fresh.keys[0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(proposer.cache.values[0], fresh.values[0], rtol=1e-4, atol=1e-5)


# EAGLE's draft tree (eagle_tree.py) ----------------------------------------------------------------------

def tree_proposer(target, seed, gamma, tree):
    """An EAGLE proposer reset on PROMPT for a tree run, and the settings."""
    from specviz.runner import CausalRunner

    settings = DecodeSettings(max_new_tokens=30, gamma=gamma, tree=tree)
    proposer = EagleProposer(random_eagle(target, seed=seed))
    tokens = torch.tensor(PROMPT)
    _, hidden = CausalRunner(target.model).forward(tokens[:-1])
    proposer.reset(tokens, settings, torch.Generator().manual_seed(0), hidden)
    return proposer, tokens, hidden


def test_eagle_tree_holds_the_chain_draft_as_its_first_line(tiny_target):
    """With every candidate kept (gamma 2: 8 + 64 nodes), the tree's best-first line is what chain drafting
    proposes, and the tree is laid out as tree.py wants (parents first, by depth)."""
    from specviz.tree import check_tree, depths, first_child_chain

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
    from specviz.runner import CausalRunner

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
        proposer.drafter.net(hidden[:trees.length].unsqueeze(0), parts.embed(sequence[1: trees.length + 1]).unsqueeze(0),
                             c, s, fresh)
        torch.testing.assert_close(trees.space.keys[0, :, : trees.length], fresh.keys[0][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(trees.space.values[0, :, : trees.length], fresh.values[0][0], rtol=1e-4, atol=1e-5)
    assert steps > 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_eagle_tree_graphs_draft_what_eager_drafting_does(tiny_target, monkeypatch):
    from specviz.models import LoadedModel
    from specviz.testing import perturbed_copy

    target = LoadedModel(name="tiny-cuda", model=perturbed_copy(tiny_target, 0.0).model.cuda(), tokenizer=None,
                         device=torch.device("cuda"), dtype=torch.float32)
    drafter = random_eagle(target, seed=3)
    drafter.net.cuda()
    settings = DecodeSettings(max_new_tokens=60, gamma=5, tree=31)
    plain = run_once(target, PlainProposer(), PROMPT, settings)
    graphed = run_once(target, EagleProposer(drafter), PROMPT, settings)
    monkeypatch.setenv("SPECVIZ_GRAPHS", "0")
    eager = run_once(target, EagleProposer(drafter), PROMPT, settings)
    assert graphed.token_ids == eager.token_ids == plain.token_ids
    assert drafter.tree_workspaces and any(space.graphs for spaces in drafter.tree_workspaces.values() for space in spaces)
    same = sum([p.token_id for p in a.positions] == [p.token_id for p in b.positions]
               for a, b in zip(graphed.steps, eager.steps))
    assert same >= 0.9 * len(eager.steps)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_catch_up_through_a_graph_writes_what_eager_feeding_does(tiny_target):
    """The drafter catching up on many positions (a prompt; adaptive's steps without a tree) replays one graph
    of CATCH_UP_ROWS rows at a time: its cache equals eager feeding, and adaptive on it gives plain output."""
    from specviz.models import LoadedModel
    from specviz.proposers.eagle_tree import CATCH_UP_ROWS, TreeDrafting
    from specviz.testing import perturbed_copy

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
    torch.testing.assert_close(graphed.space.values[:, :, :count], eager.space.values[:, :, :count], rtol=1e-4, atol=1e-5)
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
    from specviz.models import LoadedModel
    from specviz.proposers.eagle_tree import TreeDrafting
    from specviz.testing import perturbed_copy

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


# Published formats, written by the test ------------------------------------------------------------------

def write_medusa_published(folder, target, heads=2, layers=1, vocab=None, hidden=None, seed=0):
    """FasterDecoding's layout: config.json + medusa_lm_head.pt, each head with its own output layer."""
    torch.manual_seed(seed)
    hidden = hidden or target.model.config.hidden_size
    vocab = vocab or target.vocab_size
    state = {}
    for h in range(heads):
        block = {"linear.weight": torch.randn(hidden, hidden) * 0.3, "linear.bias": torch.randn(hidden) * 0.1}
        for layer in range(layers):  # their `[ResBlock] * layers` repeats one block: same tensors
            for name, value in block.items():
                state[f"{h}.{layer}.{name}"] = value
        state[f"{h}.{layers}.weight"] = torch.randn(vocab, hidden)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "medusa_lm_head.pt")
    (folder / "config.json").write_text(json.dumps({"medusa_num_heads": heads, "medusa_num_layers": layers,
                                                    "base_model_name_or_path": "tiny", "transformers_version": "4.34"}))
    return state


def write_eagle_published(folder, target, seed=0, hidden=None, vocab=None, bias=True):
    """SafeAILab's EAGLE-1 layout: a LlamaConfig-like config.json and pytorch_model.bin."""
    torch.manual_seed(seed)
    c = target.model.config
    hidden = hidden or c.hidden_size
    vocab = vocab or target.vocab_size
    heads, kv, head_dim, inter = c.num_attention_heads, c.num_key_value_heads, hidden // c.num_attention_heads, c.intermediate_size
    r = lambda *shape: torch.randn(*shape) * 0.3
    state = {
        "embed_tokens.weight": target.model.get_input_embeddings().weight.detach().clone() if vocab == target.vocab_size and hidden == c.hidden_size else r(vocab, hidden),
        "fc.weight": r(hidden, 2 * hidden),
        "layers.0.self_attn.q_proj.weight": r(heads * head_dim, hidden),
        "layers.0.self_attn.k_proj.weight": r(kv * head_dim, hidden),
        "layers.0.self_attn.v_proj.weight": r(kv * head_dim, hidden),
        "layers.0.self_attn.o_proj.weight": r(hidden, heads * head_dim),
        "layers.0.mlp.gate_proj.weight": r(inter, hidden),
        "layers.0.mlp.up_proj.weight": r(inter, hidden),
        "layers.0.mlp.down_proj.weight": r(hidden, inter),
        "layers.0.post_attention_layernorm.weight": 1 + r(hidden),
    }
    if bias:
        state["fc.bias"] = r(hidden)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "pytorch_model.bin")
    config = {"architectures": ["LlamaForCausalLM"], "bias": bias, "hidden_act": "silu", "hidden_size": hidden,
              "intermediate_size": inter, "max_position_embeddings": 512, "model_type": "llama",
              "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": 1,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": vocab, "torch_dtype": "float16"}
    (folder / "config.json").write_text(json.dumps(config))
    return state


def test_published_medusa_heads_load_and_draft_what_their_math_says(tiny_target, tmp_path):
    state = write_medusa_published(tmp_path / "medusa", tiny_target, heads=3, layers=2)
    proposer = make_proposer("medusa", tiny_target, heads=str(tmp_path / "medusa"))
    settings = DecodeSettings(max_new_tokens=30, gamma=3)
    result = run_once(tiny_target, proposer, PROMPT, settings)
    assert result.token_ids == run_once(tiny_target, PlainProposer(), PROMPT, settings).token_ids
    # the first step's drafts, recomputed from the file's tensors: head k = W_k (x + SiLU(A x + b)), applied twice
    from specviz.runner import CausalRunner
    _, hidden = CausalRunner(tiny_target.model).forward(torch.tensor(PROMPT[:-1]))
    x0 = hidden[-1]
    expected = []
    for h in range(3):
        x = x0
        for layer in range(2):
            x = x + torch.nn.functional.silu(state[f"{h}.{layer}.linear.weight"] @ x + state[f"{h}.{layer}.linear.bias"])
        expected.append(int((state[f"{h}.2.weight"] @ x).argmax()))
    assert [p.token_id for p in result.steps[0].positions] == expected


def test_published_eagle_drafter_loads_and_matches_a_llama_layer(tiny_target, tmp_path):
    """The loaded drafter must draft what a transformers Llama decoder layer computes from the same file (with
    EAGLE-1's changes: no input norm on the first layer, no final norm), fed fc(embed(x_{i+1}), f_i)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaModel

    state = write_eagle_published(tmp_path / "eagle", tiny_target, seed=4)
    proposer = make_proposer("eagle", tiny_target, heads=str(tmp_path / "eagle"))
    gamma = 4
    settings = DecodeSettings(max_new_tokens=30, gamma=gamma)
    result = run_once(tiny_target, proposer, PROMPT, settings)
    assert result.token_ids == run_once(tiny_target, PlainProposer(), PROMPT, settings).token_ids

    c = tiny_target.model.config
    reference = LlamaModel(LlamaConfig(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                                       num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                                       num_hidden_layers=1, rms_norm_eps=1e-6, vocab_size=c.vocab_size,
                                       max_position_embeddings=512, rope_theta=c.rope_parameters["rope_theta"]
                                       if getattr(c, "rope_parameters", None) else 10000.0)).eval()
    layer_state = {k.removeprefix("layers.0."): v for k, v in state.items() if k.startswith("layers.0.")}
    missing, _ = reference.layers[0].load_state_dict(layer_state, strict=False)
    assert missing == ["input_layernorm.weight"]
    reference.layers[0].input_layernorm = torch.nn.Identity()
    reference.norm = torch.nn.Identity()
    fc = torch.nn.Linear(2 * c.hidden_size, c.hidden_size)
    fc.load_state_dict({"weight": state["fc.weight"], "bias": state["fc.bias"]})
    head = tiny_target.model.get_output_embeddings().weight.detach()
    embed = tiny_target.model.get_input_embeddings()

    from specviz.runner import CausalRunner
    with torch.no_grad():
        _, hidden = CausalRunner(tiny_target.model).forward(torch.tensor(PROMPT[:-1]))
        features = list(hidden)  # f_0 .. f_{T-2}
        next_tokens = PROMPT[1:]  # x_1 .. x_{T-1}
        drafts = []
        for _ in range(gamma):  # recompute the whole sequence each time: no cache
            inputs = fc(torch.cat([embed(torch.tensor(next_tokens)), torch.stack(features)], dim=-1)).unsqueeze(0)
            out = reference(inputs_embeds=inputs, position_ids=torch.arange(len(features)).unsqueeze(0)).last_hidden_state[0, -1]
            drafts.append(int((head @ out).argmax()))
            features.append(out)
            next_tokens.append(drafts[-1])
    assert [p.token_id for p in result.steps[0].positions] == drafts


def test_heads_for_another_target_are_refused(tiny_target, tmp_path):
    hidden = tiny_target.model.config.hidden_size
    write_medusa_published(tmp_path / "m-hidden", tiny_target, hidden=hidden * 2)
    write_medusa_published(tmp_path / "m-vocab", tiny_target, vocab=tiny_target.vocab_size + 8)
    write_eagle_published(tmp_path / "e-hidden", tiny_target, hidden=hidden * 2)
    write_eagle_published(tmp_path / "e-vocab", tiny_target, vocab=tiny_target.vocab_size * 2)
    for method, name, words in [("medusa", "m-hidden", "hidden size"), ("medusa", "m-vocab", "vocabulary"),
                                ("eagle", "e-hidden", "hidden size"), ("eagle", "e-vocab", "vocabulary")]:
        with pytest.raises(DrafterMismatchError, match=words):
            make_proposer(method, tiny_target, heads=str(tmp_path / name))


def test_our_files_for_another_vocabulary_are_refused(tiny_target, tmp_path):
    from specviz.proposers.checkpoints import save_medusa

    drafter = random_medusa(tiny_target, heads=2, token_ids=torch.tensor([1, 2]))  # ids that fit any vocabulary
    save_medusa(tmp_path / "m", drafter.heads, torch.tensor([1, 2]),
                {"trained_for": {"hidden_size": 32, "vocab_size": tiny_target.vocab_size + 1}})
    with pytest.raises(DrafterMismatchError, match="vocabulary"):
        make_proposer("medusa", tiny_target, heads=str(tmp_path / "m"))


def test_hub_heads_offline_fail_at_once_with_advice(tiny_target, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="--heads"):
        make_proposer("eagle", tiny_target, heads="nobody/no-such-eagle-drafter")


def test_bad_drafter_folders_say_what_is_wrong(tiny_target, tmp_path):
    write_medusa_published(tmp_path / "medusa", tiny_target)
    with pytest.raises(ModelLoadError, match="pytorch_model.bin"):
        make_proposer("eagle", tiny_target, heads=str(tmp_path / "medusa"))  # Medusa files given to eagle
    (tmp_path / "eagle3").mkdir()
    torch.save({"midlayer.self_attn.q_proj.weight": torch.zeros(2, 2), "fc.weight": torch.zeros(2, 6)},
               tmp_path / "eagle3" / "pytorch_model.bin")
    (tmp_path / "eagle3" / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="EAGLE-3"):
        make_proposer("eagle", tiny_target, heads=str(tmp_path / "eagle3"))
    with pytest.raises(ModelLoadError, match="no trained eagle drafter ships"):
        make_proposer("eagle", tiny_target)  # tiny targets have no shipped drafter
    with pytest.raises(ModelLoadError, match="neither a folder"):
        make_proposer("medusa", tiny_target, heads=str(tmp_path / "missing"))


def test_our_saved_files_round_trip(tiny_target, tmp_path):
    from specviz.proposers.checkpoints import save_eagle, save_medusa

    subset = torch.tensor([1, 4, 9, 16])
    eagle = random_eagle(tiny_target, seed=7, token_ids=subset)
    medusa = random_medusa(tiny_target, heads=2, seed=7, token_ids=subset)
    save_eagle(tmp_path / "e", eagle.net, subset, {"note": "test"}, dtype=torch.float32)
    save_medusa(tmp_path / "m", medusa.heads, subset, {"note": "test"}, dtype=torch.float32)
    settings = DecodeSettings(max_new_tokens=20, gamma=2)
    for method, original in [("eagle", EagleProposer(eagle)), ("medusa", MedusaProposer(medusa))]:
        loaded = make_proposer(method, tiny_target, heads=str(tmp_path / method[0]))
        a, b = run_once(tiny_target, original, PROMPT, settings), run_once(tiny_target, loaded, PROMPT, settings)
        assert [s.positions[0].token_id for s in a.steps if s.positions] == \
               [s.positions[0].token_id for s in b.steps if s.positions]


def test_averaged_heads_are_the_mean_of_two_sets_and_load(tiny_target, tmp_path):
    """scripts/average_medusa.py (how the shipped heads are made): each block the two sets' mean, the second
    set's draft vocabulary, a config that records both; heads of other shapes are refused."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from specviz.proposers.checkpoints import average_medusa_blocks, save_medusa

    meta = {"trained_for": {"hidden_size": 32, "vocab_size": tiny_target.vocab_size}, "command": "test"}
    first, second = random_medusa(tiny_target, heads=2, seed=1), random_medusa(tiny_target, heads=2, seed=2)
    save_medusa(tmp_path / "a", first.heads, torch.tensor([1, 2, 3]), meta, dtype=torch.float32)
    save_medusa(tmp_path / "b", second.heads, torch.tensor([4, 5, 6, 7]), {**meta, "command": "second"},
                dtype=torch.float32)
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(root / "scripts" / "average_medusa.py"), str(tmp_path / "a"),
                    str(tmp_path / "b"), "--out", str(tmp_path / "avg")], check=True, cwd=root,
                   env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True)
    averaged = make_proposer("medusa", tiny_target, heads=str(tmp_path / "avg")).drafter
    for mixed, a, b in zip(averaged.heads.parameters(), first.heads.parameters(), second.heads.parameters()):
        torch.testing.assert_close(mixed, (a + b) / 2)
    assert averaged.outputs[0].token_ids.tolist() == [4, 5, 6, 7]
    config = json.loads((tmp_path / "avg" / "config.json").read_text())["specviz"]
    assert config["command"] == "second" and config["averaged"]["first"]["command"] == "test"
    deeper = MedusaHeads(32, 3).state_dict_published()
    with pytest.raises(ModelLoadError, match="--init"):
        average_medusa_blocks(first.heads.state_dict_published(), deeper)


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


def test_adaptive_on_an_eagle_tree_weighs_the_lookup_chain_against_the_tree(tiny_target):
    """With a draft tree, adaptive on EAGLE picks each step's kind: a lookup that knows the output wins the
    steps once its alpha is learnt (also from the tree steps, where its draft was never verified); a lookup
    that finds nothing leaves every drafting step to the tree. Greedy output is plain output either way."""
    from test_engine_tiny import NeverFinds, OracleProposer

    settings = DecodeSettings(max_new_tokens=60, gamma=6, tree=24, stop_at_eos=False)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    knows_all = AdaptiveProposer(EagleProposer(random_eagle(tiny_target, seed=3)),
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
