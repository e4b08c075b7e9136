"""The bench (bench.py): its transformers baselines give specviz's plain output, and aggregate pools and
compares on the same prompts."""
import pytest
import torch

from specviz import DecodeSettings
from specviz.api import run_once
from specviz.measure.bench import aggregate, compare_with_transformers, hf_generate
from specviz.models.loading import LoadedModel
from specviz.proposers import PlainProposer

from test_runners import PROMPT


@pytest.mark.parametrize("mode", ["hf-generate", "hf-prompt-lookup", "hf-assisted"])
def test_transformers_baselines_give_specviz_plain_output(tiny_target, tiny_drafter, mode):
    target = LoadedModel(name="t", model=tiny_target.model, tokenizer=None, device=torch.device("cpu"),
                         dtype=torch.float32)
    settings = DecodeSettings(max_new_tokens=24, gamma=3, stop_at_eos=False)
    plain = run_once(target, PlainProposer(), PROMPT, settings)
    ids, seconds = hf_generate(target, PROMPT, settings, mode, draft=tiny_drafter)
    assert ids == plain.token_ids and seconds > 0


def test_aggregate_pools_and_compares_on_the_same_prompts():
    def row(method, prompt_id, tokens, seconds, identical=True, difference=None):
        return {"prompt_id": prompt_id, "category": "c", "method": method, "new_tokens": tokens,
                "wall_seconds": seconds, "drafted": 0, "accepted": 0, "target_forwards": tokens,
                "identical_to_plain": identical, "first_difference": difference}

    plain = [row("plain", 1, 100, 1.0), row("plain", 2, 100, 3.0)]
    hf = [row("hf-generate", 1, 100, 10.0, False, 7)]
    figures = aggregate(hf, plain)
    assert figures["speedup"] == pytest.approx(0.1)  # against plain on prompt 1 only: 100 tok/s
    assert figures["identical_share"] == 0 and figures["first_difference_min"] == 7
    comparison = compare_with_transformers(plain + hf)
    assert comparison["hf-generate"]["ratio"]["plain"] == pytest.approx(10.0)


def test_a_method_entry_sets_gamma_tree_and_draft_stop():
    from specviz.measure.bench import parse_method
    from specviz.errors import InvalidSettingError

    base = DecodeSettings(gamma=4)
    assert parse_method("ngram", base) == ("ngram", base)
    method, settings = parse_method("ngram:8:64", base)
    assert (method, settings.gamma, settings.tree, settings.draft_stop) == ("ngram", 8, 64, 0.0)
    method, settings = parse_method("draft:6@0.5", base)
    assert (method, settings.gamma, settings.tree, settings.draft_stop) == ("draft", 6, 0, 0.5)
    assert parse_method("draft@0.3", base)[1].draft_stop == 0.3
    for bad in ("draft:6@x", "draft:6@1.5", "nope:4", "draft:4:2:1"):
        with pytest.raises(InvalidSettingError):
            parse_method(bad, base)
