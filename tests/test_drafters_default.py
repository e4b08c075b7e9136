"""The Medusa heads and the EAGLE drafter shipped for the default target (assets/drafters/): small files that
say how they were made, exact greedy output, acceptance that only trained weights give, and the
train-drafter command end to end on a toy budget (in this process, on the session's default model)."""
import dataclasses
import json

import pytest
import torch

from specviz import DecodeSettings, DrafterMismatchError, InvalidSettingError, ModelLoadError
from specviz.api import encode, make_proposer, run_once
from specviz.proposers.adaptive import default_lookup
from specviz.proposers import PlainProposer
from specviz.proposers.checkpoints import ASSETS, SHIPPED
from specviz.train.data import FROM_GERMAN, STARTERS, _header_ids, load_dataset, opener_ids

from command_line import run_cli
from test_default_model import PROMPTS

SHIPPED_DIR = ASSETS / SHIPPED["default"]
MAX_NEW = 32


def test_shipped_files_are_small_and_say_how_they_were_made(default_target):
    for method in ("eagle", "medusa"):
        folder = SHIPPED_DIR / method
        files = list(folder.iterdir())
        assert {"config.json", "loss.png"} <= {f.name for f in files}
        assert all(f.stat().st_size < 12 * 2**20 for f in files)
        meta = json.loads((folder / "config.json").read_text())["specviz"]
        assert meta["trained_for"]["hidden_size"] == default_target.model.config.hidden_size
        assert meta["trained_for"]["vocab_size"] == default_target.vocab_size
        assert meta["training"]["steps"] > 0 and meta["data"]["conversations"] > 0
    assert (ASSETS / "README.md").is_file()


def test_shipped_datastore_is_small_and_says_how_it_was_made(default_target):
    folder = SHIPPED_DIR / "retrieval"
    assert {f.name for f in folder.iterdir()} == {"config.json", "datastore.npz"}
    assert (folder / "datastore.npz").stat().st_size < 12 * 2**20
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == default_target.vocab_size and config["tokens"] > 1_000_000
    assert "train-drafter --method retrieval" in config["specviz"]["command"]


@pytest.fixture(scope="module")
def plain_outputs(default_target):
    settings = DecodeSettings(max_new_tokens=MAX_NEW)
    return {name: run_once(default_target, PlainProposer(), encode(default_target, text), settings).token_ids
            for name, text in PROMPTS.items()}


@pytest.mark.parametrize("method,gamma,tree,min_tau", [("eagle", 5, 0, 1.4), ("medusa", 3, 0, 1.1),
                                                       ("eagle", 6, 24, 1.8), ("medusa", 4, 16, 1.3),
                                                       ("retrieval", 4, 0, 1.75), ("retrieval", 6, 24, 2.2)])
def test_shipped_drafters_are_exact_and_trained(default_target, plain_outputs, method, gamma, tree, min_tau):
    """Chains and draft trees (tree > 0): a tree verifies several candidates a step, so more is accepted."""
    settings = DecodeSettings(max_new_tokens=MAX_NEW, gamma=gamma, tree=tree)
    tokens = forwards = 0
    for name, text in PROMPTS.items():
        result = run_once(default_target, make_proposer(method, default_target), encode(default_target, text), settings)
        assert result.token_ids == plain_outputs[name], f"{method} differs from plain on {name!r}"
        tokens += result.metrics.new_tokens
        forwards += result.metrics.target_forwards
    # random heads accept almost nothing (tau ~1.0); these thresholds sit well below what the shipped ones reach
    # (retrieval: 2.0 and 2.57 here, where lookup in the sequence alone, ngram, reaches 1.5 and 1.64)
    print(f"{method} gamma {gamma} tree {tree}: tau {tokens / forwards:.2f}")
    assert tokens / forwards > min_tau


def test_adaptive_runs_on_the_shipped_eagle_drafter(default_target):
    assert make_proposer("adaptive", default_target).base.name == "eagle"


def test_adaptive_can_look_up_in_the_datastore(default_target, plain_outputs):
    proposer = make_proposer("adaptive", default_target, adaptive_lookup="retrieval")
    assert (proposer.base.name, proposer.lookup.name) == ("eagle", "retrieval")
    # the default: on a CPU (as here) the datastore, n-gram lookup where the target is on a GPU
    # (proposers.adaptive.default_lookup)
    assert make_proposer("adaptive", default_target).lookup.name == "retrieval"
    assert make_proposer("adaptive", default_target, adaptive_lookup="ngram").lookup.name == "ngram"
    assert make_proposer("adaptive", default_target, adaptive_base="retrieval").lookup is None  # it looks up itself
    for settings in (DecodeSettings(max_new_tokens=MAX_NEW, gamma=6),
                     DecodeSettings(max_new_tokens=MAX_NEW, gamma=6, tree=24)):
        for name, text in PROMPTS.items():
            result = run_once(default_target, make_proposer("adaptive", default_target, adaptive_lookup="retrieval"),
                              encode(default_target, text), settings)
            assert result.token_ids == plain_outputs[name]
    with pytest.raises(InvalidSettingError, match="auto, ngram or retrieval"):
        make_proposer("adaptive", default_target, adaptive_lookup="medusa")


def test_adaptive_default_lookup_depends_on_the_device(default_target, tiny_target):
    assert default_lookup(default_target) == "retrieval"
    # on a GPU the datastore's host lookup is a sixth of a step: n-gram lookup there (no forward runs here)
    assert default_lookup(dataclasses.replace(default_target, device=torch.device("cuda"))) == "ngram"
    assert default_lookup(tiny_target) == "ngram"  # no datastore ships for it


def test_shipped_heads_are_refused_for_another_target(tiny_target):
    for method in ("eagle", "medusa"):
        with pytest.raises(DrafterMismatchError, match="hidden size 576"):
            make_proposer(method, tiny_target, heads=str(SHIPPED_DIR / method))
    with pytest.raises(DrafterMismatchError, match="vocabulary of 49152 tokens"):
        make_proposer("retrieval", tiny_target, heads=str(SHIPPED_DIR / "retrieval"))
    with pytest.raises(ModelLoadError, match="train-drafter --method retrieval"):
        make_proposer("retrieval", tiny_target)  # nothing ships for it


def test_magpie_openers_let_the_target_go_on_with_words(default_target):
    """The opening words of a self-written prompt end on a word: ending on a lone space token made the target
    go on with a number (the control), so most prompts of the training data began "Who was 35058347?"."""
    tokenizer = default_target.tokenizer
    header = _header_ids(default_target)
    digits = torch.tensor([i for i in range(default_target.vocab_size) if tokenizer.decode([i]).strip().isdigit()])

    def digit_probability(starts):
        width = max(len(ids) for ids in starts)
        batch = torch.tensor([[tokenizer.eos_token_id] * (width - len(ids)) + ids for ids in starts])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in starts])
        with torch.inference_mode():
            logits = default_target.model(input_ids=batch, attention_mask=mask).logits[:, -1].float()
        return float(logits.softmax(-1)[:, digits].sum(-1).mean())

    openers = STARTERS[::4]
    for opener in openers:
        assert tokenizer.decode(opener_ids(tokenizer, opener)) == opener
    spaced = [header + tokenizer.encode(opener + " ", add_special_tokens=False) for opener in openers]
    assert digit_probability(spaced) > 0.5  # control: the way the openers were once encoded
    assert digit_probability([header + opener_ids(tokenizer, opener) for opener in openers]) < 0.1


@pytest.mark.train
def test_train_drafter_command_end_to_end(default_target, tmp_path):
    """A toy budget on the CPU: data written by the target, a few steps, files that load and decode exactly."""
    data = tmp_path / "data.pt"
    proc = run_cli("train-drafter", "--method", "medusa", "--out", str(tmp_path / "medusa"), "--data", str(data),
                   "--prompts", "6", "--prompt-tokens", "48", "--response-tokens", "48", "--gen-batch", "6",
                   "--german-share", "1", "--data-only", "--device", "cpu")
    assert proc.returncode == 0 and data.is_file(), proc.stderr[-2000:]
    written = torch.load(data, weights_only=True)
    texts = [default_target.tokenizer.decode(ids) for ids in written["sequences"]]
    assert written["stats"]["german_conversations"] > 0
    assert any(template.split("{")[0] in text for template in FROM_GERMAN for text in texts)  # and back
    assert "answers into German" in proc.stderr and "German into English" in proc.stderr
    assert not (tmp_path / "medusa" / "checkpoint.pt").exists()  # stopped after the data
    proc = run_cli("train-drafter", "--method", "medusa", "--out", str(tmp_path / "medusa"), "--data", str(data),
                   "--steps", "3", "--eval-every", "2", "--draft-vocab", "512", "--heads", "2", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "train medusa" in proc.stderr  # the progress bar
    # a warm start from those heads: their blocks are where training begins
    proc = run_cli("train-drafter", "--method", "medusa", "--out", str(tmp_path / "warm"), "--data", str(data),
                   "--steps", "1", "--lr", "0", "--draft-vocab", "256", "--heads", "2", "--init",
                   str(tmp_path / "medusa"),
                   "--device", "cpu")
    assert proc.returncode == 0 and "started from the heads" in proc.stderr, proc.stderr[-2000:]
    from safetensors.torch import load_file
    before, after = (load_file(str(tmp_path / name / "medusa_lm_head.safetensors")) for name in ("medusa", "warm"))
    assert torch.equal(before["1.0.linear.weight"], after["1.0.linear.weight"])  # lr 0: unchanged
    assert before["draft_vocab"].numel() == 512 and after["draft_vocab"].numel() == 256
    proc = run_cli("train-drafter", "--method", "medusa", "--out", str(tmp_path / "bad"), "--data", str(data),
                   "--steps", "1", "--heads", "3", "--init", str(tmp_path / "medusa"), "--device", "cpu")
    assert proc.returncode != 0 and "pass --heads and --layers that match it" in proc.stderr
    proc = run_cli("train-drafter", "--method", "eagle", "--out", str(tmp_path / "eagle"), "--data", str(data),
                   "--steps", "2", "--draft-vocab", "512", "--ttt-steps", "2", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for method, weights in (("medusa", "medusa_lm_head.safetensors"), ("eagle", "model.safetensors")):
        folder = tmp_path / method
        assert {"config.json", weights, "loss.png", "checkpoint.pt", "train_log.json"} <= {f.name
                                                                                           for f in folder.iterdir()}
        assert (folder / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        meta = json.loads((folder / "config.json").read_text())["specviz"]
        assert meta["training"]["steps"] == (3 if method == "medusa" else 2)
        assert meta["draft_vocab"]["size"] == 512
        ids = encode(default_target, PROMPTS["short"])
        settings = DecodeSettings(max_new_tokens=12, gamma=2)
        result = run_once(default_target, make_proposer(method, default_target, heads=str(folder)), ids, settings)
        assert result.token_ids == run_once(default_target, PlainProposer(), ids, settings).token_ids
    proc = run_cli("train-drafter", "--method", "eagle", "--out", str(tmp_path / "x"), "--data", str(data))
    assert proc.returncode == 2 and "--steps" in proc.stderr
    # retrieval: no training, the answers of the same data (given twice: several files read as one)
    proc = run_cli("train-drafter", "--method", "retrieval", "--out", str(tmp_path / "retrieval"),
                   "--data", f"{data},{data}", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((tmp_path / "retrieval" / "config.json").read_text())
    assert config["specviz"]["answers"] == 2 * len(load_dataset(data)["sequences"])
    ids = encode(default_target, PROMPTS["short"])
    settings = DecodeSettings(max_new_tokens=12, gamma=3)
    result = run_once(default_target, make_proposer("retrieval", default_target, heads=str(tmp_path / "retrieval")),
                      ids, settings)
    assert result.token_ids == run_once(default_target, PlainProposer(), ids, settings).token_ids
    proc = run_cli("train-drafter", "--method", "retrieval", "--out", str(tmp_path / "x"),
                   "--data", f"{data},{tmp_path / 'missing.pt'}")
    assert proc.returncode == 2 and "no such file" in proc.stderr and "missing.pt" in proc.stderr
