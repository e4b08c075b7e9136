"""Batched drafting with a model (batch_draft.py through batch.decode_batch): every row of a ragged batch drafted
by one batched draft model gives its batch-1 output, greedy and sampled, and a refill queue keeps the batch
full while each prompt still gives its batch-1 output."""
import dataclasses

import pytest
import torch

from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once
from specviz.api import batch_drafting
from specviz.engine.batch import decode_batch
from specviz.engine.batch_draft import choose_rows, ragged_ids
from specviz.errors import InvalidSettingError

PROMPTS = ["Write a Python function that checks whether a number is prime.", "List the planets.",
           "Tell me a joke about caches, then explain it."]  # different lengths: a ragged batch
TINY = [[3, 7, 1, 3, 7], [5, 2], [9, 9, 9, 4, 1, 2, 8], [4], [6, 1, 6, 1, 6]]


def batch_one(target, method, ids, settings, prompt=0, draft=None):
    seeded = settings if settings.seed is None else dataclasses.replace(settings, seed=settings.seed + prompt)
    return run_once(target, make_proposer(method, target, draft), ids, seeded, detail=False).token_ids


def test_a_draft_model_batch_gives_each_row_its_batch_one_output_greedy(tiny_target, tiny_drafter):
    settings = DecodeSettings(max_new_tokens=14, gamma=3, stop_at_eos=False)
    run = decode_batch(tiny_target, batch_drafting("draft", tiny_target, tiny_drafter), TINY, settings)
    assert run.token_ids == [batch_one(tiny_target, "draft", ids, settings, draft=tiny_drafter) for ids in TINY]
    assert run.token_ids == [batch_one(tiny_target, "plain", ids, settings) for ids in TINY]
    assert 0 < run.accepted < run.drafted  # the perturbed drafter is rejected at times: rows catch up unevenly


def test_a_draft_model_batch_samples_each_row_as_its_batch_one_run(tiny_target, tiny_drafter):
    settings = DecodeSettings(max_new_tokens=14, gamma=3, temperature=0.9, seed=5, stop_at_eos=False)
    drafting = batch_drafting("draft", tiny_target, tiny_drafter)
    run = decode_batch(tiny_target, drafting, TINY, settings)
    assert run.token_ids == [batch_one(tiny_target, "draft", ids, settings, b, tiny_drafter)
                             for b, ids in enumerate(TINY)]
    other = decode_batch(tiny_target, drafting, TINY, dataclasses.replace(settings, seed=6))
    assert other.token_ids != run.token_ids  # control: the seed matters, so equality above says something


def test_a_distilled_draft_batch_spreads_its_draft_vocabulary_as_batch_one_does(tiny_target):
    """A distilled draft model scores some token ids only: its q must reach each row over the target's ids, as
    in its batch-1 run (sampled, where a wrong spread of the scores would change what is drawn)."""
    from specviz.models.loading import LoadedModel
    from specviz.proposers.distilled import build_draft_model, draft_config, start_from_target

    model = build_draft_model(tiny_target.model, draft_config(tiny_target.model.config, 1),
                              torch.tensor([0, 1, 3, 4, 7, 9, 12, 15, 20, 21, 30]))
    start_from_target(model, tiny_target.model, [1])
    draft = LoadedModel("distilled-tiny", model.eval(), None, tiny_target.device, tiny_target.dtype)
    settings = DecodeSettings(max_new_tokens=12, gamma=3, temperature=0.9, seed=2, stop_at_eos=False)
    run = decode_batch(tiny_target, batch_drafting("draft", tiny_target, draft), TINY, settings)
    assert run.token_ids == [batch_one(tiny_target, "draft", ids, settings, b, draft) for b, ids in enumerate(TINY)]
    assert 0 < run.accepted < run.drafted


@pytest.mark.parametrize("method", ["draft", "early-exit"])
def test_the_default_model_drafting_for_itself_matches_plain_greedy(default_target, method):
    ids = [encode(default_target, p) for p in PROMPTS[1:]]
    settings = DecodeSettings(max_new_tokens=12, gamma=4)
    run = decode_batch(default_target, batch_drafting(method, default_target, default_target), ids, settings)
    assert run.token_ids == [batch_one(default_target, "plain", i, settings) for i in ids]
    assert run.drafted > 0
    if method == "draft":  # the target as its own drafter: every draft is accepted (early-exit's cut of a quarter
        assert run.accepted == run.drafted  # of the layers agrees with it next to never, at batch 1 as here)


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_a_refill_queue_keeps_the_batch_full_and_each_prompt_its_output(tiny_target, tiny_drafter, method):
    settings = DecodeSettings(max_new_tokens=10, gamma=3, temperature=0.8, seed=3, stop_at_eos=False)
    drafting = batch_drafting(method, tiny_target, tiny_drafter)
    queued = decode_batch(tiny_target, drafting, TINY, settings, batch_size=2)
    assert queued.token_ids == [batch_one(tiny_target, method, ids, settings, b, tiny_drafter)
                                for b, ids in enumerate(TINY)]
    assert queued.token_ids == decode_batch(tiny_target, drafting, TINY, settings).token_ids
    # control: two rows at a time take more verify passes than all five at once
    assert queued.forwards > decode_batch(tiny_target, drafting, TINY, settings).forwards


def test_ragged_catch_up_pads_on_the_right_and_rows_draw_only_their_drafts():
    ids, counts = ragged_ids([[4], [7, 8], [9]])
    assert ids.tolist() == [[4, 0], [7, 8], [9, 0]] and counts.tolist() == [1, 2, 1]
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
    greedy, _ = choose_rows(logits, DecodeSettings(), [None, None], [True, True])
    assert greedy == [1, 0]
    generators = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)]
    sampled, _ = choose_rows(logits, DecodeSettings(temperature=1.0), generators, [True, False])
    assert sampled[1] == 0 and not torch.equal(generators[0].get_state(), generators[1].get_state())


def test_a_draft_batch_needs_a_draft_model(tiny_target):
    with pytest.raises(InvalidSettingError, match="needs a draft model"):
        batch_drafting("draft", tiny_target)
    with pytest.raises(InvalidSettingError, match="does not batch"):
        batch_drafting("eagle", tiny_target)
