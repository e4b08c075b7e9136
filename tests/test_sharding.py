"""The several-GPU code path (a target sharded with an accelerate device map), exercised on the CPU:
some layers on the CPU, some offloaded to disk (their weights sit on the `meta` device until a forward
pass needs them). Greedy output must equal the unsharded model's, plain and speculative."""
import json

import pytest

from specviz import DecodeSettings, ModelLoadError, load_model
from specviz.api import make_proposer, run_once
from specviz.proposers import PlainProposer
from specviz.models.testing import save_tiny_model

from test_errors import assert_one_line_error, run_cli

SPLIT = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
         "model.layers.2": "cpu", "model.layers.3": "disk", "model.norm": "cpu", "lm_head": "cpu"}
PROMPT = [3, 7, 1, 3, 7, 2, 9, 3, 7]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {"target": save_tiny_model(tmp_path_factory.mktemp("target"), seed=0),
            "draft": save_tiny_model(tmp_path_factory.mktemp("draft"), seed=5, layers=1)}


def test_sharded_model_is_split_and_offloaded(folders):
    sharded = load_model(folders["target"], device="cpu", device_map=SPLIT)
    assert sharded.devices == ["cpu", "disk"]
    assert sharded.model.hf_device_map["model.layers.1"] == "disk"
    assert sharded.model.model.layers[1].self_attn.q_proj.weight.device.type == "meta"
    assert str(sharded.device) == "cpu"


@pytest.mark.parametrize("method", ["plain", "draft", "ngram", "early-exit", "adaptive"])
def test_sharded_greedy_equals_single_device(folders, method):
    settings = DecodeSettings(max_new_tokens=24, gamma=3)
    single = load_model(folders["target"], device="cpu")
    sharded = load_model(folders["target"], device="cpu", device_map=SPLIT)
    drafter = load_model(folders["draft"], device="cpu")
    expected = run_once(single, PlainProposer(), PROMPT, settings).token_ids
    result = run_once(sharded, make_proposer(method, sharded, drafter), PROMPT, settings)
    assert result.token_ids == expected
    if method in ("draft", "ngram"):
        assert result.metrics.drafted > 0


def test_device_map_auto_on_a_cpu_machine(folders):
    model = load_model(folders["target"], device="cpu", device_map="auto")
    assert model.devices == ["cpu"]


def test_cli_with_device_map(folders):
    proc = run_cli("generate", "--target", folders["target"], "--raw-prompt", "--prompt", "w3 w7 w1 w3 w7",
                   "--method", "draft", "--draft", folders["draft"], "--device", "cpu",
                   "--device-map", json.dumps(SPLIT), "--max-new-tokens", "12", "--json", "--compare-plain")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["identical_to_plain"] is True


def test_bad_device_map_options():
    with pytest.raises(ModelLoadError, match="device map"):
        load_model("default", device_map="everywhere")
    with pytest.raises(ModelLoadError, match="only applies with a device map"):
        load_model("default", max_memory="0=10GiB")
    with pytest.raises(ModelLoadError, match="DEVICE=SIZE"):
        load_model("default", device_map="auto", max_memory="10GiB")
    assert_one_line_error(run_cli("generate", "--prompt", "hi", "--device-map", "{not json"), "device map")
    assert_one_line_error(run_cli("generate", "--prompt", "hi", "--max-memory", "0=1GiB"), "device map")


def test_app_places_targets_with_the_launch_device_map(folders):
    from specviz.service.run_request import RunRequest
    from specviz.service.run_setup import load_models
    from specviz.service.serving import configure_placement

    configure_placement(device_map=SPLIT)
    try:
        target, draft = load_models(RunRequest(prompt="w1 w2", method="draft", target=folders["target"],
                                               draft=folders["draft"]))
    finally:
        configure_placement()
    assert target.model.hf_device_map["model.layers.3"] == "disk"
    assert draft.devices == ["cpu"] and not hasattr(draft.model, "hf_device_map")
