"""Drafter files (proposers/checkpoints.py): the published Medusa and EAGLE layouts load and draft what
their math says, our own files round-trip, averaged heads are the mean of two sets, and files made for
another target or vocabulary, or folders that are wrong, are refused with a message that says what to do."""
import json

import pytest
import torch

from specviz import DecodeSettings, DrafterMismatchError, ModelLoadError
from specviz.api import make_proposer, run_once
from specviz.proposers import EagleProposer, MedusaProposer, PlainProposer
from specviz.proposers.medusa_net import MedusaHeads

from random_drafters import random_eagle, random_medusa, write_eagle_published, write_medusa_published
from test_engine import PROMPT


def test_published_medusa_heads_load_and_draft_what_their_math_says(tiny_target, tmp_path):
    state = write_medusa_published(tmp_path / "medusa", tiny_target, heads=3, layers=2)
    proposer = make_proposer("medusa", tiny_target, heads=str(tmp_path / "medusa"))
    settings = DecodeSettings(max_new_tokens=30, gamma=3)
    result = run_once(tiny_target, proposer, PROMPT, settings)
    assert result.token_ids == run_once(tiny_target, PlainProposer(), PROMPT, settings).token_ids
    # the first step's drafts, recomputed from the file's tensors: head k = W_k (x + SiLU(A x + b)), applied twice
    from specviz.runners.causal import CausalRunner
    _, hidden = CausalRunner(tiny_target.model).forward(torch.tensor(PROMPT[:-1]))
    x0 = hidden[-1]
    expected = []
    for h in range(3):
        x = x0
        for layer in range(2):
            x = x + torch.nn.functional.silu(
                state[f"{h}.{layer}.linear.weight"] @ x + state[f"{h}.{layer}.linear.bias"]
            )
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
                                       num_attention_heads=c.num_attention_heads,
                                       num_key_value_heads=c.num_key_value_heads,
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

    from specviz.runners.causal import CausalRunner
    with torch.no_grad():
        _, hidden = CausalRunner(tiny_target.model).forward(torch.tensor(PROMPT[:-1]))
        features = list(hidden)  # f_0 .. f_{T-2}
        next_tokens = PROMPT[1:]  # x_1 .. x_{T-1}
        drafts = []
        for _ in range(gamma):  # recompute the whole sequence each time: no cache
            inputs = fc(torch.cat([embed(torch.tensor(next_tokens)), torch.stack(features)], dim=-1)).unsqueeze(0)
            out = reference(inputs_embeds=inputs,
                            position_ids=torch.arange(len(features)).unsqueeze(0)).last_hidden_state[0, -1]
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
    """scripts/average_medusa.py (how the shipped heads are made, run in this process): each block the two sets'
    mean, the second set's draft vocabulary, a config that records both; heads of other shapes are refused."""
    from command_line import run_script
    from specviz.proposers.checkpoints import average_medusa_blocks, save_medusa

    meta = {"trained_for": {"hidden_size": 32, "vocab_size": tiny_target.vocab_size}, "command": "test"}
    first, second = random_medusa(tiny_target, heads=2, seed=1), random_medusa(tiny_target, heads=2, seed=2)
    save_medusa(tmp_path / "a", first.heads, torch.tensor([1, 2, 3]), meta, dtype=torch.float32)
    save_medusa(tmp_path / "b", second.heads, torch.tensor([4, 5, 6, 7]), {**meta, "command": "second"},
                dtype=torch.float32)
    done = run_script("average_medusa", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "avg")
    assert done.returncode == 0, done.stderr
    averaged = make_proposer("medusa", tiny_target, heads=str(tmp_path / "avg")).drafter
    for mixed, a, b in zip(averaged.heads.parameters(), first.heads.parameters(), second.heads.parameters()):
        torch.testing.assert_close(mixed, (a + b) / 2)
    assert averaged.outputs[0].token_ids.tolist() == [4, 5, 6, 7]
    config = json.loads((tmp_path / "avg" / "config.json").read_text())["specviz"]
    assert config["command"] == "second" and config["averaged"]["first"]["command"] == "test"
    deeper = MedusaHeads(32, 3).state_dict_published()
    with pytest.raises(ModelLoadError, match="--init"):
        average_medusa_blocks(first.heads.state_dict_published(), deeper)


def test_medusa_heads_are_counted_in_the_file_not_in_config_json(tiny_target, tmp_path):
    """FasterDecoding's medusa-vicuna-7b-v1.3 says 2 heads in config.json and holds 5 in its file."""
    write_medusa_published(tmp_path / "m", tiny_target, heads=3)
    config = tmp_path / "m" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "medusa_num_heads": 2}))
    assert make_proposer("medusa", tiny_target, heads=str(tmp_path / "m")).drafter.heads.num_heads == 3
    write_medusa_published(tmp_path / "short", tiny_target, heads=3)  # another folder: loaded drafters are kept
    config = tmp_path / "short" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "medusa_num_heads": 4}))
    with pytest.raises(ModelLoadError, match="holds 3 heads, but config.json says 4"):
        make_proposer("medusa", tiny_target, heads=str(tmp_path / "short"))
