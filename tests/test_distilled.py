"""The distilled draft model (proposers/distilled.py): its files, its loading, its training, and exact greedy
output through the `draft` method. Sampled exactness is in test_sampling_exactness.py with the other methods."""
import json

import pytest
import torch

from specviz import DecodeSettings, generate
from specviz.errors import DrafterMismatchError, ModelLoadError
from specviz.proposers import ModelDrafter
from specviz.proposers.checkpoints import load_draft_model, shipped_drafter_exists
from specviz.proposers.distilled import (build_draft_model, draft_config, load_distilled, save_distilled,
                                         spread_layers, start_from_target)
from specviz.proposers.drafter_files import MAX_FILE_BYTES, split_files
from specviz.proposers.draft_model import spread_vocabulary
from specviz.train.trainer import TrainOptions, init_layer_ids, train

DRAFT_VOCAB = torch.tensor([0, 3, 4, 7, 9, 12, 15, 20, 21, 30])


def distilled_from(target, layers=1, token_ids=DRAFT_VOCAB, sources=None):
    model = build_draft_model(target.model, draft_config(target.model.config, layers), token_ids)
    start_from_target(model, target.model, sources or spread_layers(len(target.model.get_decoder().layers), layers))
    return model.eval()


def meta_for(target):
    embed = target.model.get_input_embeddings().weight
    return {"method": "draft-model", "trained_for": {"hidden_size": embed.shape[1], "vocab_size": embed.shape[0]}}


def test_spread_layers_keep_the_first_and_the_last():
    assert spread_layers(30, 1) == [0]
    assert spread_layers(30, 2) == [0, 29]
    assert spread_layers(30, 3) == [0, 14, 29]  # round(14.5) is 14: Python rounds half to even
    with pytest.raises(ValueError):
        spread_layers(2, 3)


def test_init_layers_by_name_or_by_ids():
    assert init_layer_ids("first", 30, 3) == [0, 1, 2]
    assert init_layer_ids("0,29", 30, 2) == [0, 29]
    with pytest.raises(Exception, match="give 2 layer ids"):
        init_layer_ids("0,30", 30, 2)


def test_files_are_split_under_the_size_limit():
    state = {f"t{i}": torch.zeros(1000, dtype=torch.float16) for i in range(5)}  # 2,000 bytes each
    groups = split_files(state, 4500)
    assert [list(g) for g in groups] == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert split_files(state, 10 ** 6) == [state]


def test_spread_vocabulary_puts_each_score_at_its_token():
    logits = torch.tensor([1.0, 2.0, 3.0])
    full = spread_vocabulary(logits, torch.tensor([4, 0, 2]), 6)
    assert full.tolist() == [2.0, float("-inf"), 3.0, float("-inf"), 1.0, float("-inf")]


def test_the_draft_shares_the_target_embedding_and_scores_its_vocabulary(tiny_target):
    model = distilled_from(tiny_target, layers=2)
    assert model.get_input_embeddings() is tiny_target.model.get_input_embeddings()
    rows = tiny_target.model.get_output_embeddings().weight[DRAFT_VOCAB]
    assert torch.equal(model.get_output_embeddings().weight, rows)
    logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape[-1] == len(DRAFT_VOCAB)


def test_saved_files_load_back_to_the_same_logits(tiny_target, tmp_path):
    model = distilled_from(tiny_target, layers=2)
    files = save_distilled(tmp_path, model, DRAFT_VOCAB, meta_for(tiny_target), dtype=torch.float32)
    assert all(f.stat().st_size < MAX_FILE_BYTES for f in files)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert stored["num_hidden_layers"] == 2 and stored["specviz"]["method"] == "draft-model"
    loaded = load_distilled(tmp_path, tiny_target.model)
    ids = torch.tensor([[5, 1, 9, 2, 7]])
    assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-6)
    assert torch.equal(loaded.draft_vocab, DRAFT_VOCAB)
    fresh = build_draft_model(tiny_target.model, draft_config(tiny_target.model.config, 2), DRAFT_VOCAB)
    assert not torch.allclose(fresh(input_ids=ids).logits, model(input_ids=ids).logits)  # control: loading mattered


def test_a_draft_for_another_target_is_refused(tiny_target, tmp_path):
    model = distilled_from(tiny_target)
    meta = meta_for(tiny_target)
    meta["trained_for"]["vocab_size"] += 1
    save_distilled(tmp_path, model, DRAFT_VOCAB, meta)
    with pytest.raises(DrafterMismatchError, match="train one for it"):
        load_distilled(tmp_path, tiny_target.model)


def test_a_folder_without_weights_is_refused(tiny_target, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**tiny_target.model.config.to_dict(),
                                                      "specviz": meta_for(tiny_target)}))
    with pytest.raises(ModelLoadError, match="not a distilled draft model"):
        load_distilled(tmp_path, tiny_target.model)


def test_greedy_output_equals_plain(tiny_target):
    model = distilled_from(tiny_target, layers=2)
    settings = DecodeSettings(max_new_tokens=24, gamma=3, stop_at_eos=False)
    from specviz.api import run_once
    from specviz.proposers import PlainProposer

    prompt = [1, 5, 9, 2, 5, 9, 2, 5]
    run = run_once(tiny_target, ModelDrafter(model, tiny_target.vocab_size), prompt, settings, "")
    plain = run_once(tiny_target, PlainProposer(), prompt, settings, "")
    assert run.token_ids == plain.token_ids
    assert run.metrics.drafted > 0 and run.metrics.accepted < run.metrics.drafted  # drafted, and was rejected


@pytest.mark.train
def test_training_writes_a_draft_that_agrees_more_than_its_start(tiny_target, tmp_path):
    """A few hundred steps on the target's own greedy continuations: the held-out chain acceptance rises
    above that of the untrained start (the control), and the files load through load_draft_model."""
    from specviz.api import run_once
    from specviz.proposers import PlainProposer

    generator = torch.Generator().manual_seed(0)
    sequences, prompt_lengths = [], []
    for _ in range(40):
        prompt = torch.randint(0, 32, (6,), generator=generator).tolist()
        answer = run_once(tiny_target, PlainProposer(), prompt,
                          DecodeSettings(max_new_tokens=24, stop_at_eos=False), "").token_ids
        sequences.append(prompt + answer)
        prompt_lengths.append(len(prompt))
    data = {"sequences": sequences, "prompt_lengths": prompt_lengths, "greedy": [True] * 40}
    options = TrainOptions(method="draft-model", steps=1, batch_tokens=512, lr=3e-3, warmup=5, draft_vocab=0,
                           draft_layers=1, val_share=0.2, eval_every=10 ** 6, save_every=10 ** 6)
    before = train(tiny_target, data, tmp_path / "start", options, log=lambda *_: None)["training"]["held_out"]
    options.steps = 300
    after = train(tiny_target, data, tmp_path / "trained", options, log=lambda *_: None)["training"]["held_out"]
    assert after["chain_acceptance"][0] > before["chain_acceptance"][0] + 0.1
    draft = load_draft_model(str(tmp_path / "trained"), tiny_target)
    assert draft.model.get_input_embeddings() is tiny_target.model.get_input_embeddings()


def test_the_shipped_distilled_draft_is_exact_and_accepted(default_target):
    if not shipped_drafter_exists("distilled", default_target):
        pytest.skip("no distilled draft model ships in assets/drafters")
    settings = DecodeSettings(max_new_tokens=48, gamma=4)
    prompt = "Write a Python function that returns the sum of the squares of a list of numbers."
    report = generate(prompt, method="draft", target=default_target, draft="distilled", settings=settings,
                      compare_plain=True)
    assert report.identical_to_plain
    untrained = distilled_from(default_target, layers=2)  # the control: the same shape before training
    start = generate(prompt, method="draft", target=default_target,
                     draft=default_target.__class__("untrained", untrained, default_target.tokenizer,
                                                    default_target.device, default_target.dtype),
                     settings=settings)
    assert report.result.metrics.acceptance_rate > start.result.metrics.acceptance_rate + 0.2


def test_distilled_names_the_shipped_draft_only_where_one_ships(tiny_target):
    with pytest.raises(ModelLoadError, match="train-drafter --method draft-model"):
        load_draft_model("distilled", tiny_target)
