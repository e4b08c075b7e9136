"""EAGLE-3 drafters (proposers/eagle3_files.py, eagle_net.py; train-drafter --method eagle3), loaded by the `eagle`
method: the published layout written with random weights at the 8B shape and a tiny one, loaded from a folder and
decoding exactly what plain decoding does on both loops, chains and trees; drafters that do not fit their target
refused with the reason; a drafter trained here written in the same layout, and accepted."""
import dataclasses
import json
from math import prod

import pytest
import torch

from specviz import DecodeSettings, load_model
from specviz.api import make_proposer, run_once
from specviz.errors import DrafterMismatchError, ModelLoadError
from specviz.models.published_layouts import (SHAPES, eagle3_config, eagle3_draft_vocab, eagle3_tensors,
                                              write_eagle3, write_published)
from specviz.models.testing import tiny_causal_lm
from specviz.proposers import PlainProposer
from specviz.proposers.eagle3_files import default_layers
from specviz.runners.static import StaticRunner
from specviz.train.trainer import TrainOptions, train

TINY = SHAPES["tiny-deep"]  # 6 layers, grouped-query attention, as the 8B target


@pytest.fixture(scope="module")
def tiny_target():
    return load_model(TINY.target, "cpu", "float32")


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The tiny published folder, as scripts/write_published_drafters writes it."""
    out = tmp_path_factory.mktemp("published")
    write_published(out, "tiny-deep", methods=("eagle3",))
    return out / "eagle3"


@pytest.mark.quick
def test_the_8b_layout_has_the_published_shapes():
    shape = SHAPES["llama-8b"]
    tensors = eagle3_tensors(shape, eagle3_draft_vocab("llama-8b"))
    assert tensors["fc.weight"] == (4096, 3 * 4096) and tensors["lm_head.weight"] == (32000, 4096)
    assert tensors["midlayer.self_attn.q_proj.weight"] == (4096, 2 * 4096)
    assert tensors["midlayer.self_attn.k_proj.weight"] == (8 * 128, 2 * 4096)
    assert 2 * sum(prod(s) for s in tensors.values()) == 849_379_328  # float16, the maps besides
    config = eagle3_config(shape, 32000)
    assert (config["vocab_size"], config["draft_vocab_size"], config["num_hidden_layers"]) == (128256, 32000, 1)
    assert "eagle_aux_hidden_state_layer_ids" not in config  # the default then: inputs of layers 2, 16 and 29
    assert default_layers(32) == (1, 15, 28) and default_layers(30) == (1, 14, 26)


def test_the_tiny_published_folder_loads_and_decodes_exactly(tiny_target, published, monkeypatch):
    state = torch.load(published / "pytorch_model.bin", weights_only=True)
    assert not any(k.startswith(("embed_tokens", "layers.")) for k in state)
    proposer = make_proposer("eagle", tiny_target, heads=str(published))
    drafter = proposer.drafter
    assert proposer.target_layers == (0, 2, 4) and drafter.net.config.eagle3  # a 6-layer target: spread
    assert drafter.head.scored == eagle3_draft_vocab("tiny-deep")
    assert torch.equal(drafter.head.token_ids, state["t2d"].nonzero()[:, 0])
    assert drafter.parts.embed is tiny_target.model.get_input_embeddings()

    prompt = [5, 9, 5, 9, 5, 7, 3, 2]
    for tree, mode, loop in ((0, "0", "host"), (9, "force", "device")):  # the trained drafter's test runs all four
        settings = DecodeSettings(max_new_tokens=12, gamma=4, tree=tree, stop_at_eos=False)
        plain = run_once(tiny_target, PlainProposer(), prompt, settings, detail=False)
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", mode)
        result = run_once(tiny_target, proposer, prompt, settings, detail=False)
        assert result.settings["loop"] == loop
        assert result.token_ids == plain.token_ids
        assert result.metrics.drafted > 0


def test_q_lives_on_the_draft_vocabulary(tiny_target, published):
    """Sampling: the drafter's q spreads over the target's whole vocabulary, zero outside its draft vocabulary,
    and every drafted token (a target id, mapped by d2t) is one of it."""
    proposer = make_proposer("eagle", tiny_target, heads=str(published))
    prompt = torch.tensor([5, 9, 5, 9, 5, 7])
    runner = StaticRunner(tiny_target.model, features=proposer.target_layers)
    _, hidden = runner.forward(prompt[:-1])
    assert hidden.shape == (5, 3 * TINY.hidden)
    settings = DecodeSettings(max_new_tokens=8, gamma=3, temperature=1.0, seed=0)
    proposer.reset(prompt, settings, torch.Generator().manual_seed(0), hidden)
    draft = proposer.propose(prompt, 3)
    inside = torch.zeros(TINY.vocab, dtype=torch.bool)
    inside[proposer.drafter.head.token_ids] = True
    assert draft.probs.shape == (3, TINY.vocab)
    assert torch.allclose(draft.probs.sum(-1), torch.ones(3))
    assert float(draft.probs[:, ~inside].abs().max()) == 0.0 and bool(inside[draft.token_ids].all())


def _write(folder, shape=TINY, **kwargs):
    write_eagle3(folder, shape, 64, dtype=torch.float32, **kwargs)
    return str(folder)


def test_drafters_that_do_not_fit_are_refused_with_the_reason(tiny_target, tmp_path):
    cases = [
        (_write(tmp_path / "hidden", dataclasses.replace(TINY, hidden=32)), "hidden size 32"),
        (_write(tmp_path / "vocab", dataclasses.replace(TINY, vocab=256)), "vocabulary of 256"),
        (_write(tmp_path / "layers", layer_ids=[2, 4, 9]), "layers \\[1, 3, 8\\]"),
        (_write(tmp_path / "embedding", layer_ids=[0, 3, 5]), "embedding"),
    ]
    for folder, reason in cases:
        with pytest.raises(DrafterMismatchError, match=reason):
            make_proposer("eagle", tiny_target, heads=folder)
    write_eagle3(tmp_path / "maps", TINY, 64, dtype=torch.float32)
    broken = torch.load(tmp_path / "maps" / "pytorch_model.bin", weights_only=True)
    broken["d2t"][-1] += TINY.vocab  # maps its last draft token past the vocabulary
    torch.save(broken, tmp_path / "maps" / "pytorch_model.bin")
    with pytest.raises(DrafterMismatchError, match="d2t"):
        make_proposer("eagle", tiny_target, heads=str(tmp_path / "maps"))
    shallow = load_model(SHAPES["tiny"].target, "cpu", "float32")  # 2 layers: no three before its last
    with pytest.raises(DrafterMismatchError, match="has 2 layers"):
        make_proposer("eagle", shallow, heads=str(tmp_path / "maps"))


# a drafter trained here ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deep_target():
    """A tiny target of 4 layers (three of them before its last to read), sharp enough to repeat itself."""
    target = tiny_causal_lm(vocab_size=32, seed=0, layers=4, sharpness=4.0)
    target.describe = lambda: "tiny"
    return target


def answers(target, count: int, seed: int = 0, length: int = 30) -> dict:
    """The target's own greedy continuations of random prompts (what a drafter is trained on)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, 31, (count, 6), generator=generator)
    with torch.no_grad():
        out = target.model.generate(prompts, max_new_tokens=length, min_new_tokens=length, do_sample=False,
                                    attention_mask=torch.ones_like(prompts), pad_token_id=0)
    return {"sequences": out.tolist(), "prompt_lengths": [6] * count}


def options(steps: int) -> TrainOptions:
    return TrainOptions(method="eagle3", steps=steps, batch_tokens=512, lr=5e-3, warmup=5, draft_vocab=24,
                        ttt_steps=3, eval_every=10 ** 6, save_every=10 ** 6, val_share=0.2)


@pytest.fixture(scope="module")
def trained(deep_target, tmp_path_factory):
    """(a folder trained 40 steps on the target's answers, its held-out figures, the untrained start's)."""
    data = answers(deep_target, 40)
    folder = tmp_path_factory.mktemp("eagle3")
    start = train(deep_target, data, folder / "start", options(1), log=lambda *_: None)
    meta = train(deep_target, data, folder / "trained", options(40), log=lambda *_: None)
    return folder / "trained", meta, start["training"]["held_out"]


def test_training_writes_the_published_layout_that_the_loader_reads(deep_target, trained):
    folder, meta, before = trained
    after = meta["training"]["held_out"]
    assert after["chain_acceptance"][0] > before["chain_acceptance"][0] + 0.2  # the untrained start: the control
    config = json.loads((folder / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3] and config["draft_vocab_size"] == 24
    assert config["specviz"]["trained_for"]["num_layers"] == 4
    from safetensors.torch import load_file

    state = {k: v for file in folder.glob("model-*.safetensors") for k, v in load_file(str(file)).items()}
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", "midlayer.hidden_norm.weight"} <= set(state)
    proposer = make_proposer("eagle", deep_target, heads=str(folder))
    assert proposer.target_layers == (0, 1, 2)
    ids = torch.arange(24) + state["d2t"]
    assert torch.equal(proposer.drafter.head.token_ids, ids) and bool(state["t2d"][ids].all())
    deeper = tiny_causal_lm(vocab_size=32, seed=0, layers=5)
    with pytest.raises(DrafterMismatchError, match="target of 4 layers"):
        make_proposer("eagle", deeper, heads=str(folder))


@pytest.mark.parametrize("tree", [0, 9])
def test_a_trained_drafter_is_accepted_and_the_output_is_plain_on_both_loops(deep_target, trained, monkeypatch, tree):
    folder = trained[0]
    settings = DecodeSettings(max_new_tokens=30, gamma=4, tree=tree, stop_at_eos=False)
    prompt = answers(deep_target, 1, seed=7, length=2)["sequences"][0]
    plain = run_once(deep_target, PlainProposer(), prompt, settings, detail=False)
    runs = {}
    for mode in ("0", "force"):
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", mode)
        runs[mode] = run_once(deep_target, make_proposer("eagle", deep_target, heads=str(folder)), prompt, settings)
    host, device = runs["0"], runs["force"]
    assert (host.settings["loop"], device.settings["loop"]) == ("host", "device")
    assert host.token_ids == plain.token_ids == device.token_ids
    assert 0 < host.metrics.accepted < host.metrics.drafted
    for host_step, device_step in zip(host.steps[:3], device.steps[:3]):  # before the host shortens near the end
        assert [p.token_id for p in device_step.positions] == [p.token_id for p in host_step.positions]
        assert device_step.n_accepted == host_step.n_accepted


def test_a_broken_file_says_it_is_eagle3(tiny_target, tmp_path):
    write_eagle3(tmp_path, TINY, 64, dtype=torch.float32)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="EAGLE-3 drafter whose config.json lacks hidden_size"):
        make_proposer("eagle", tiny_target, heads=str(tmp_path))
