"""The published drafter layouts with random weights (published_layouts.py, scripts/write_published_drafters.py):
at the 7B shape their tensors add up to the sizes the Hub lists for the published files, and the tiny
folders the script writes load through specviz's own loader (Medusa with the 5 heads its file holds, though
its config.json says 2) and decode exactly what plain decoding does."""
import json
from math import prod

import pytest
import torch

from specviz import DecodeSettings, load_model
from specviz.api import make_proposer, run_once
from specviz.proposers import PlainProposer
from specviz.models.published_layouts import SHAPES, eagle1_config, eagle1_tensors, medusa1_config, medusa1_tensors
from specviz.models.random_target import parse_shape

from command_line import run_script


@pytest.mark.quick
def test_the_7b_layouts_weigh_what_the_published_files_weigh():
    shape = SHAPES["vicuna-7b"]
    # pytorch_model.bin of yuhuili/EAGLE-Vicuna-7B-v1.3 is 1.47 GB of float32 (embeddings included)
    assert 4 * sum(prod(s) for s in eagle1_tensors(shape).values()) == 1_468_039_168
    # medusa_lm_head.pt of FasterDecoding/medusa-vicuna-7b-v1.3 is 1.48 GB of bfloat16: 5 heads
    assert 2 * sum(prod(s) for s in medusa1_tensors(shape).values()) == 1_478_533_120
    config = eagle1_config(shape)
    assert "num_key_value_heads" not in config and "bias" not in config and config["num_hidden_layers"] == 1
    assert medusa1_config(2)["medusa_num_heads"] == 2
    target = parse_shape(shape.target)
    assert (target["hidden"], target["intermediate"], target["heads"], target["kv_heads"], target["vocab"]) == \
        (shape.hidden, shape.intermediate, shape.heads, shape.kv_heads, shape.vocab) and target["layers"] == 32


def test_the_tiny_folders_load_through_specviz_and_decode_exactly(tmp_path):
    proc = run_script("write_published_drafters", "--shape", "tiny", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)
    assert set(written["files"]) == {"eagle/config.json", "eagle/pytorch_model.bin", "medusa/config.json",
                                     "medusa/medusa_lm_head.pt"}
    eagle_state = torch.load(tmp_path / "eagle" / "pytorch_model.bin", weights_only=True)
    medusa_state = torch.load(tmp_path / "medusa" / "medusa_lm_head.pt", weights_only=True)
    assert {v.dtype for v in eagle_state.values()} == {torch.float32}
    assert {v.dtype for v in medusa_state.values()} == {torch.bfloat16}
    assert json.loads((tmp_path / "medusa" / "config.json").read_text())["medusa_num_heads"] == 2

    target = load_model(SHAPES["tiny"].target, "cpu", "float32")
    eagle = make_proposer("eagle", target, heads=str(tmp_path / "eagle"))
    medusa = make_proposer("medusa", target, heads=str(tmp_path / "medusa"))
    assert medusa.drafter.heads.num_heads == 5 and len(medusa.drafter.outputs) == 5
    settings = DecodeSettings(max_new_tokens=16, gamma=5, stop_at_eos=False)
    prompt = [5, 9, 5, 9, 5, 7]
    plain = run_once(target, PlainProposer(), prompt, settings)
    for proposer in (eagle, medusa):
        result = run_once(target, proposer, prompt, settings)
        assert result.token_ids == plain.token_ids
        assert result.metrics.drafted > 0
