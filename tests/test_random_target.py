"""Random targets of a stated shape (random_target.py) and the weight-read floor (floor.py): shapes parse or
are refused with a message that says what to write, a tiny one decodes through the fast path, and the bench
reports the floor."""
import json

import pytest
import torch

from specviz import DecodeSettings, load_model
from specviz.api import make_proposer, run_once
from specviz.errors import ModelLoadError
from specviz.measure.floor import describe_floor, weight_bytes, weight_read_floor
from specviz.models.random_target import SHAPES, parse_shape

from test_errors import run_cli


@pytest.mark.quick
def test_shapes_parse_with_overrides():
    assert parse_shape("random:llama-8b") == SHAPES["llama-8b"]
    assert parse_shape("random:llama-8b,layers=4")["layers"] == 4
    numbers = "random:hidden=64,intermediate=96,layers=1,heads=4,kv_heads=1,vocab=100"
    assert parse_shape(numbers) == dict(hidden=64, intermediate=96, layers=1, heads=4, kv_heads=1, vocab=100)


@pytest.mark.quick
@pytest.mark.parametrize("spec,says", [("random:llama-9b", "unknown shape"), ("random:layers=2", "leaves"),
                                       ("random:llama-tiny,depth=3", "KEY=N"), ("random:llama-tiny,heads=3", "divide")])
def test_bad_shapes_say_what_to_write(spec, says):
    with pytest.raises(ModelLoadError, match=says):
        parse_shape(spec)


def test_a_tiny_random_target_decodes_exactly_through_the_fast_path():
    target = load_model("random:llama-tiny", "cpu", "float32")
    assert target.model.config.num_key_value_heads == 2 and not target.model.config.tie_word_embeddings
    settings = DecodeSettings(max_new_tokens=24, gamma=3, stop_at_eos=False)
    prompt = [5, 9, 5, 9, 5]
    plain = run_once(target, make_proposer("plain", target), prompt, settings)
    ngram = run_once(target, make_proposer("ngram", target), prompt, settings)
    assert len(plain.token_ids) == 24 and ngram.token_ids == plain.token_ids
    assert plain.settings["runner"] == "StaticRunner"


@pytest.mark.quick
def test_the_floor_is_the_weights_over_the_bandwidth(monkeypatch):
    from specviz.measure import floor

    model = torch.nn.Linear(1000, 500, dtype=torch.bfloat16)  # 500,500 parameters of 2 bytes
    assert weight_bytes(model) == 1_001_000
    unknown = weight_read_floor(model, torch.device("cpu"), {"tokens_per_second": 500.0})
    assert unknown["floor_ms"] is None and "not known" in describe_floor(unknown)
    monkeypatch.setattr(floor, "spec_bandwidth", lambda device: 1e9)
    result = weight_read_floor(model, torch.device("cuda"), {"tokens_per_second": 500.0, "verify_ms_per_step": 1.5})
    assert result["floor_ms"] == pytest.approx(1.001)
    assert result["plain_over_floor"] == pytest.approx(2.0 / 1.001)
    assert result["step_over_floor"] == pytest.approx(1.5 / 1.001)
    assert "plain decoding 2.000 ms a token (2.00x)" in describe_floor(result)


def test_bench_reports_the_floor_of_a_random_target(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["w1 w2 w3 w1 w2"]}) + "\n")
    out = tmp_path / "bench.json"
    proc = run_cli("bench", "--target", "random:llama-tiny", "--raw-prompt", "--prompts", str(prompts),
                   "--methods", "plain", "--max-new-tokens", "8", "--device", "cpu", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["config"]["target"] == "random:llama-tiny"
    # float32: embeddings and the untied output layer 2 x 512 x 64; a layer: q, o 64 x 64, k, v 64 x 32 (two
    # key-value heads of 16), gate, up, down 64 x 128, two norms of 64; two layers and the final norm
    layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    parameters = 4 * (2 * 512 * 64 + 2 * layer + 64)
    assert parameters <= report["floor"]["weight_bytes"] <= parameters + 1024  # and the rotary frequencies
    assert report["floor"]["floor_ms"] is None  # a CPU's bandwidth is not in the table
    assert "weight-read floor" in proc.stdout
