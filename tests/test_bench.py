"""The bench (bench.py): its transformers baselines give specviz's plain output, and aggregate pools and
compares on the same prompts."""
import pytest
import torch

from specviz import DecodeSettings
from specviz.api import run_once
from specviz.bench import aggregate, compare_with_transformers, hf_generate
from specviz.models import LoadedModel
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
