"""DFlash block drafting (proposers/dflash*.py, train/dflash.py): a block trained at once is the block drafted
from the cache; its tree holds the best paths; greedy output is plain's on the host and the device loop, with the
same drafts; training raises held-out acceptance above its start and resumes; the runner hands over the target's
layer outputs; z-lab's layout loads and a drafter that does not fit its target is refused with the reason."""
import itertools
import json
import math
from pathlib import Path

import pytest
import torch

from specviz.api import make_proposer, run_once
from specviz.errors import DrafterMismatchError, ModelLoadError
from specviz.models.published_layouts import Shape, dflash_config, write_dflash
from specviz.models.testing import tiny_causal_lm
from specviz.options import EngineOptions
from specviz.proposers import PlainProposer
from specviz.proposers.dflash import DFlashProposer
from specviz.proposers.dflash_files import load_dflash
from specviz.proposers.dflash_net import DFlashConfig, DFlashDrafter, DFlashNet, draft_block, feed_context
from specviz.proposers.draft_head import DraftHead, TargetParts
from specviz.rule.sampling import warp_probs
from specviz.rule.tree_device import factored_tree
from specviz.runners.causal import CausalRunner
from specviz.runners.static import StaticRunner
from specviz.settings import DecodeSettings
from specviz.train.dflash import block_batch, sample_anchors, train_dflash
from specviz.train.trainer import TrainOptions

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
MASK = 31


@pytest.fixture(scope="module")
def deep_target():
    """A tiny target of 4 layers (a drafter reads two of those before its last), sharp enough to repeat itself."""
    target = tiny_causal_lm(vocab_size=32, seed=0, layers=4, sharpness=4.0)
    target.describe = lambda: "tiny"
    return target


def random_drafter(target, seed=0, block=8, layers=2) -> DFlashDrafter:
    torch.manual_seed(seed)
    config = DFlashConfig.like_target(target.model.config, layers=layers, features=2, mask_token_id=MASK,
                                      block_size=block)
    net = DFlashNet(config).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    net.to(target.device, target.dtype)
    parts = TargetParts(target.model, config.head_dim)
    return DFlashDrafter(net, parts, DraftHead.from_target(parts, None), "random")


def answers(target, count: int, seed: int = 0, length: int = 30) -> dict:
    """The target's own greedy continuations of random prompts (what a drafter is trained on)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, MASK, (count, 6), generator=generator)
    with torch.no_grad():
        out = target.model.generate(prompts, max_new_tokens=length, min_new_tokens=length, do_sample=False,
                                    attention_mask=torch.ones_like(prompts), pad_token_id=0)
    return {"sequences": out.tolist(), "prompt_lengths": [6] * count}


def options(steps: int) -> TrainOptions:
    return TrainOptions(method="dflash", steps=steps, batch_tokens=512, lr=5e-3, warmup=5, draft_vocab=0,
                        draft_layers=1, block_size=6, anchors=6, target_features=2, mask_token_id=MASK,
                        eval_every=10 ** 6, save_every=10 ** 6, val_share=0.2)


@pytest.fixture(scope="module")
def trained(deep_target, tmp_path_factory):
    """(a folder trained 80 steps on the target's answers, its held-out figures, the untrained start's)."""
    data = answers(deep_target, 40)
    folder = tmp_path_factory.mktemp("dflash")
    start = train_dflash(deep_target, data, folder / "start", options(1), log=lambda *_: None)
    meta = train_dflash(deep_target, data, folder / "trained", options(80), log=lambda *_: None)
    return folder / "trained", meta["training"]["held_out"], start["training"]["held_out"]


def test_a_block_trained_at_once_is_the_block_drafted_from_the_cache(deep_target):
    """train_forward over one block (the context's keys and values recomputed) equals feed_context then draft_block
    (the context cached slot by slot, the block written past it); and a second block beside the first in the same
    forward, each seeing only its own context, leaves the first unchanged."""
    drafter = random_drafter(deep_target)
    config, parts = drafter.config, drafter.parts
    runner = CausalRunner(deep_target.model, features=drafter.target_layers)
    sequence = torch.randint(0, MASK, (14,), generator=torch.Generator().manual_seed(1))
    _, features = runner.forward(sequence)
    start = 9
    cache = drafter.new_cache(64)
    with torch.no_grad():
        feed_context(drafter, cache, features[:start], torch.arange(start))
        cached = draft_block(drafter, cache, sequence[start:start + 1], torch.tensor([start]),
                             start + config.block_size)
        anchors = torch.tensor([[start, 4]])
        blocks = block_batch(sequence[None], torch.tensor([14]), anchors, torch.tensor([[True, True]]),
                             config.block_size, MASK)
        cos_c, sin_c = drafter.rotary(torch.arange(14))
        cos_b, sin_b = (t.reshape(1, -1, config.head_dim) for t in drafter.rotary(blocks["positions"].flatten()))
        trained = drafter.net.train_forward(features[None], cos_c, sin_c, parts.embed(blocks["tokens"]), cos_b, sin_b,
                                            blocks["mask"])[0]
    assert torch.allclose(trained[:config.block_size], cached, atol=1e-5)
    assert not torch.allclose(trained[config.block_size:], cached, atol=1e-2)  # the control: another block differs


def test_block_batches_label_the_answer_after_each_anchor_and_mask_the_rest():
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 0, 0]])
    blocks = block_batch(ids, torch.tensor([6]), torch.tensor([[3, 1]]), torch.tensor([[True, False]]), 4, MASK)
    assert blocks["tokens"].tolist() == [[8, MASK, MASK, MASK, 6, MASK, MASK, MASK]]
    assert blocks["labels"].tolist() == [[-1, 9, 10, -1, -1, -1, -1, -1]]  # past the end, and an unreal anchor
    mask = blocks["mask"][0]
    assert mask[0, :8].tolist() == [True, True, True, False, False, False, False, False]  # context before 3
    assert mask[0, 8:].tolist() == [True] * 4 + [False] * 4  # its own block, all of it
    anchors, real = sample_anchors(torch.tensor([8, 5]), torch.tensor([3, 3]), 8, 6, torch.Generator().manual_seed(0))
    picked = set(anchors[0][real[0]].tolist())
    assert picked == {2, 3, 4, 5, 6} and sorted(anchors[1][real[1]].tolist()) == [2, 3]


def test_the_tree_holds_the_best_paths_of_the_independent_positions():
    """Against every path through each position's candidates, brute force: the tree's nodes are the `budget` best
    prefixes, parents first, each node's parent its own prefix."""
    generator = torch.Generator().manual_seed(0)
    for trial in range(20):
        depth, count, budget = 3, 3, 1 + trial % 9
        scores = torch.randn(depth, count, generator=generator).log_softmax(-1).sort(-1, descending=True).values
        ids = torch.stack([torch.randperm(20, generator=generator)[:count] for _ in range(depth)])
        tokens, parents = factored_tree(ids, scores, budget).tolist()
        prefixes = {}
        for length in range(1, depth + 1):
            for picks in itertools.product(range(count), repeat=length):
                prefixes[picks] = float(sum(scores[d, p] for d, p in enumerate(picks)))
        best = sorted(prefixes.values(), reverse=True)[:budget]
        paths = []
        for node, (token, parent) in enumerate(zip(tokens, parents)):
            assert parent < node
            paths.append((paths[parent] if parent >= 0 else ()) + (token,))
        got = sorted((sum(float(scores[d, ids[d].tolist().index(t)]) for d, t in enumerate(path)) for path in paths),
                     reverse=True)
        assert len(set(paths)) == len(paths) == budget
        assert all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(got, best)), trial


def test_the_runner_hands_over_the_layers_read_and_the_same_logits(deep_target):
    """StaticRunner and CausalRunner give the same layer outputs; the logits do not change with them (the control:
    the last hidden state differs from the features); the last layer is refused (transformers normalises it)."""
    ids = torch.randint(0, 32, (9,), generator=torch.Generator().manual_seed(2))
    static, causal = StaticRunner(deep_target.model, features=(0, 2)), CausalRunner(deep_target.model, features=(0, 2))
    plain = StaticRunner(deep_target.model)
    (logits, features), (causal_logits, causal_features) = static.forward(ids), causal.forward(ids)
    plain_logits, hidden = plain.forward(ids)
    assert features.shape == (9, 64) and torch.allclose(features, causal_features, atol=1e-5)
    assert torch.equal(logits, plain_logits) and torch.allclose(causal_logits, plain_logits, atol=1e-5)
    assert not torch.allclose(features[:, 32:], hidden, atol=1e-2)
    with pytest.raises(ValueError, match="before its last"):
        StaticRunner(deep_target.model, features=(1, 3))


@pytest.mark.parametrize("tree", [0, 9])
def test_greedy_output_is_plain_on_both_loops_with_the_same_drafts(deep_target, trained, monkeypatch, tree):
    folder = trained[0]
    settings = DecodeSettings(max_new_tokens=30, gamma=5, tree=tree, stop_at_eos=False)
    prompt = answers(deep_target, 1, seed=7, length=2)["sequences"][0]
    plain = run_once(deep_target, PlainProposer(), prompt, settings, detail=False)
    runs = {}
    for mode in ("0", "force"):
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", mode)
        runs[mode] = run_once(deep_target, make_proposer("dflash", deep_target, heads=str(folder)), prompt, settings)
    host, device = runs["0"], runs["force"]
    assert (host.settings["loop"], device.settings["loop"]) == ("host", "device")
    assert host.token_ids == plain.token_ids == device.token_ids
    assert host.metrics.accepted > 0 and host.metrics.accepted < host.metrics.drafted
    for host_step, device_step in zip(host.steps[:3], device.steps[:3]):  # before the host shortens near the end
        assert [p.token_id for p in device_step.positions] == [p.token_id for p in host_step.positions]
        assert (device_step.n_accepted, device_step.tree_size) == (host_step.n_accepted, host_step.tree_size)


def test_a_sampled_block_draws_each_position_from_its_own_q(deep_target, trained):
    """q at each drafted position is the drafter's warped distribution there, and the drafted token has probability
    under it; the positions differ (one forward, many distributions)."""
    proposer = make_proposer("dflash", deep_target, heads=str(trained[0]))
    prompt = torch.tensor(answers(deep_target, 1, seed=3, length=4)["sequences"][0])
    settings = DecodeSettings(max_new_tokens=20, gamma=4, temperature=0.8, top_k=10, seed=0)
    runner = StaticRunner(deep_target.model, features=proposer.target_layers)
    _, hidden = runner.forward(prompt[:-1])
    proposer.reset(prompt, settings, torch.Generator().manual_seed(0), hidden)
    draft = proposer.propose(prompt, 4)
    assert draft.size == 4 and draft.probs.shape == (4, 32)
    assert torch.allclose(draft.probs, warp_probs(draft.logits, settings))
    assert all(draft.probs[i, t] > 0 for i, t in enumerate(draft.token_ids.tolist()))
    assert not torch.allclose(draft.probs[0], draft.probs[-1])


def test_training_raises_held_out_acceptance_and_resumes(deep_target, trained, tmp_path):
    """After 80 steps the held-out chain acceptance is well above the untrained start's (the control); the folder
    loads; --resume goes on from the checkpoint's step."""
    folder, after, before = trained
    assert after["chain_acceptance"][0] > before["chain_acceptance"][0] + 0.2
    assert after["expected_tau"] > before["expected_tau"] + 0.5
    written = json.loads((folder / "config.json").read_text())
    assert written["dflash_config"]["mask_token_id"] == MASK and written["specviz"]["method"] == "dflash"
    drafter = load_dflash(folder, deep_target, EngineOptions())
    assert drafter.parts.embed is deep_target.model.get_input_embeddings()
    data = answers(deep_target, 12, seed=5)
    first = train_dflash(deep_target, data, tmp_path, options(3), log=lambda *_: None)
    resumed = options(5)
    again = train_dflash(deep_target, data, tmp_path, resumed, resume=True, log=lambda *_: None)
    assert (first["training"]["steps"], again["training"]["steps"]) == (3, 5)
    assert len(again["commands"]) == 2


def shape_of(target, layers=None) -> Shape:
    c = target.model.config
    return Shape(hidden=c.hidden_size, intermediate=c.intermediate_size, heads=c.num_attention_heads,
                 kv_heads=c.num_key_value_heads, vocab=target.vocab_size, target=target.name,
                 layers=layers or c.num_hidden_layers)


def test_zlab_layout_loads_drafts_and_stays_exact(deep_target, tmp_path):
    write_dflash(tmp_path, shape_of(deep_target), layers=2, dtype=torch.float32, std=0.3)
    drafter = load_dflash(tmp_path, deep_target, EngineOptions())
    assert drafter.config.block_size == 16 and drafter.target_layers == (0, 2)
    settings = DecodeSettings(max_new_tokens=20, gamma=15, stop_at_eos=False)
    run = run_once(deep_target, DFlashProposer(drafter), [1, 2, 3, 4], settings)
    assert run.token_ids == run_once(deep_target, PlainProposer(), [1, 2, 3, 4], settings).token_ids
    assert run.metrics.drafted > 0


@pytest.mark.parametrize("change,error,message", [
    (lambda c: c.update(num_target_layers=32), DrafterMismatchError, "trained for a target of 32 layers"),
    (lambda c: c.update(hidden_size=64), DrafterMismatchError, "hidden size 64"),
    (lambda c: c["dflash_config"].update(mask_token_id=500), DrafterMismatchError, "mask token 500"),
    (lambda c: c.pop("dflash_config"), ModelLoadError, "not a DFlash drafter"),
    (lambda c: c.update(num_hidden_layers=3), ModelLoadError, "do not match config.json"),
])
def test_a_drafter_that_does_not_fit_is_refused_with_the_reason(deep_target, tmp_path, change, error, message):
    shape = shape_of(deep_target)
    config = dflash_config(shape, layers=2)
    write_dflash(tmp_path, shape, layers=2, dtype=torch.float32, config=config)
    change(config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(error, match=message):
        load_dflash(tmp_path, deep_target, EngineOptions())


def test_the_control_of_the_refusals_loads(deep_target, tmp_path):
    shape = shape_of(deep_target)
    write_dflash(tmp_path, shape, layers=2, dtype=torch.float32)
    assert load_dflash(tmp_path, deep_target, EngineOptions()).config.num_target_layers == 4


def test_a_datastores_answers_become_conversations(default_target):
    from specviz.train.data import datastore_dataset, is_datastore

    folder = Path(__file__).resolve().parents[1] / "assets" / "drafters" / "smollm2-135m-instruct" / "retrieval"
    assert is_datastore(folder) and is_datastore(folder / "datastore.npz") and not is_datastore(folder / "x.pt")
    data = datastore_dataset(folder, default_target)
    header = default_target.encode_prompt("", chat=True)
    first = data["sequences"][0]
    assert first[:len(header)] == header and data["prompt_lengths"][0] == len(header)
    assert data["stats"]["answer_tokens"] == sum(len(s) - len(header) for s in data["sequences"])
    assert 20000 < len(data["sequences"]) and default_target.vocab_size not in first  # no separator left


@cuda
def test_dflash_through_graphs_gives_the_host_loops_output_and_never_waits(monkeypatch):
    """On a GPU in float32: the device loop's graphs (compiled) give the host loop's output for chains and trees, and a
    step's functions run with CUDA's sync check set to fail on any read-back."""
    from specviz.engine import device_loop

    target = tiny_causal_lm(vocab_size=32, seed=0, layers=4, sharpness=4.0)
    target.model.to("cuda")
    target = target.__class__(target.name, target.model, None, torch.device("cuda"), torch.float32)
    drafter = random_drafter(target)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    for tree in (0, 9):
        settings = DecodeSettings(max_new_tokens=40, gamma=5, tree=tree, stop_at_eos=False)
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "1")
        device = run_once(target, DFlashProposer(drafter), prompt, settings, detail=False)
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "0")
        host = run_once(target, DFlashProposer(drafter), prompt, settings, detail=False)
        assert (device.settings["loop"], host.settings["loop"]) == ("device", "host")
        assert device.token_ids == host.token_ids
    runner = StaticRunner(target.model, compile=False, features=drafter.target_layers)
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "1")
    for temperature in (0.0, 1.0):
        settings = DecodeSettings(gamma=5, temperature=temperature, top_k=10 if temperature else 0)
        loop = device_loop.DeviceLoop.for_run(runner, DFlashProposer(drafter), settings, 0, 8)
        loop.reserve(64)
        state = loop._state()
        ids = torch.tensor(prompt, device="cuda")
        runner.reset()
        _, hidden = runner.forward(ids[:-1], logits_for="none")
        state.start(ids)
        if loop.sampled:
            state.warp.set(settings)
            state.generator.manual_seed(0)
        loop.lookup.start(ids, hidden)
        loop._lookup_step(state, 128)
        loop._verify_step(state, 128)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                loop._lookup_step(state, 128)
                loop._verify_step(state, 128)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert state.length.item() >= 8 + 4


def test_a_target_outside_the_fast_path_hands_over_its_layers_too(tmp_path):
    """A Qwen3 target (q and k norms: transformers' forward, CausalRunner) with a drafter in z-lab's layout: the
    runner hands over the layers read, and greedy output is plain's; the control: without them the drafter is given
    the last hidden state, which has another width."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from specviz.models.loading import LoadedModel
    from specviz.runners.static import make_runner

    config = Qwen3Config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    target = LoadedModel(name="tiny-qwen3", model=Qwen3ForCausalLM(config).eval(), tokenizer=None,
                         device=torch.device("cpu"), dtype=torch.float32)
    runner = make_runner(target.model, features=(0, 2))
    assert isinstance(runner, CausalRunner) and runner.forward(torch.tensor([1, 2, 3]))[1].shape == (3, 64)
    assert make_runner(target.model).forward(torch.tensor([1, 2, 3]))[1].shape == (3, 32)
    write_dflash(tmp_path, shape_of(target), layers=2, dtype=torch.float32, std=0.3)
    proposer = DFlashProposer(load_dflash(tmp_path, target, EngineOptions()))
    settings = DecodeSettings(max_new_tokens=12, gamma=6, stop_at_eos=False)
    run = run_once(target, proposer, [1, 2, 3, 4], settings)
    assert run.settings["runner"] == "CausalRunner" and run.metrics.drafted > 0
    assert run.token_ids == run_once(target, PlainProposer(), [1, 2, 3, 4], settings).token_ids


def test_training_can_start_from_a_trained_drafter(deep_target, trained, tmp_path):
    """--init: one step from the trained folder keeps nearly all of its held-out acceptance, far above the untrained
    start's (the control: the same one step from scratch)."""
    folder, after, before = trained
    warm = options(1)
    warm.init = str(folder)
    data = answers(deep_target, 40)
    held = train_dflash(deep_target, data, tmp_path / "warm", warm, log=lambda *_: None)["training"]["held_out"]
    assert held["chain_acceptance"][0] > before["chain_acceptance"][0] + 0.2
    assert held["chain_acceptance"][0] > after["chain_acceptance"][0] - 0.1
