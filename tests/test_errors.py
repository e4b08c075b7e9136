"""Bad input gets a clear error and nothing else: a specific exception in the library; exit code 2 and one
line on stderr, no traceback, on the command line (run in this process: command_line.run_cli)."""
import math

import pytest

from specviz import (DecodeSettings, InvalidSettingError, NotCausalLMError, OfflineError, SpeculativeRun,
                     VocabularyMismatchError, generate, load_model)
from specviz.api import make_proposer
from specviz.proposers import PlainProposer

from command_line import run_cli


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    error_lines = [line for line in lines if line.startswith("specviz: error:")]
    assert len(error_lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in error_lines[0]
    return error_lines[0]


# the library ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, fragment", [
    (DecodeSettings(gamma=0), "gamma"),
    (DecodeSettings(gamma=33), "gamma"),
    (DecodeSettings(temperature=-0.5), "temperature"),
    (DecodeSettings(temperature=math.nan), "temperature"),
    (DecodeSettings(temperature="hot"), "temperature"),
    (DecodeSettings(top_p=0.0), "top-p"),
    (DecodeSettings(top_p=1.5), "top-p"),
    (DecodeSettings(top_k=-1), "top-k"),
    (DecodeSettings(max_new_tokens=0), "max-new-tokens"),
    (DecodeSettings(draft_stop=1.0), "draft-stop"),
    (DecodeSettings(draft_stop=-0.1), "draft-stop"),
])
def test_bad_settings_raise(settings, fragment):
    with pytest.raises(InvalidSettingError, match=fragment):
        settings.validate()


def test_empty_prompt_raises_before_loading_anything():
    with pytest.raises(InvalidSettingError, match="empty"):
        generate("   ", target="no-such-model-is-loaded-first")


def test_prompt_and_output_must_fit_the_context(tiny_target):
    with pytest.raises(InvalidSettingError, match="empty"):
        SpeculativeRun(tiny_target, PlainProposer(), [], DecodeSettings())
    with pytest.raises(InvalidSettingError, match="longer than the model's context"):
        SpeculativeRun(tiny_target, PlainProposer(), [1] * 600, DecodeSettings())
    with pytest.raises(InvalidSettingError, match="beyond the context"):
        SpeculativeRun(tiny_target, PlainProposer(), [1] * 10, DecodeSettings(max_new_tokens=600))


def test_unknown_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="offline.*'default'"):
        load_model("nobody-here/no-such-model", device="cpu")


def test_unknown_hub_id_without_network_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # cannot resolve, whatever the machine's network
    with pytest.raises(OfflineError):
        load_model("nobody-here/no-such-model", device="cpu")


def test_missing_local_path_is_named():
    with pytest.raises(Exception, match="neither a model folder"):
        load_model("./no/such/folder", device="cpu")


def test_drafter_with_other_vocabulary_is_refused(default_target, foreign_models):
    drafter = load_model(foreign_models["other_vocab"], device="cpu")
    with pytest.raises(VocabularyMismatchError) as info:
        make_proposer("draft", default_target, drafter)
    assert "8 tokens" in str(info.value) and foreign_models["other_vocab"] in str(info.value)
    assert "default" in str(info.value)


def test_model_that_is_not_a_causal_lm_is_refused(foreign_models):
    with pytest.raises(NotCausalLMError, match="not a causal language model"):
        load_model(foreign_models["encoder"], device="cpu")


def test_draft_method_without_draft_model():
    from specviz.models.testing import tiny_causal_lm

    with pytest.raises(InvalidSettingError, match="needs a draft model"):
        make_proposer("draft", tiny_causal_lm())
    with pytest.raises(InvalidSettingError, match="unknown method"):
        make_proposer("magic", tiny_causal_lm())


# the command line ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, fragment", [
    (["--prompt", ""], "empty"),
    (["--prompt", "hi", "--gamma", "0"], "gamma"),
    (["--prompt", "hi", "--gamma", "40"], "gamma"),
    (["--prompt", "hi", "--temperature", "-1"], "temperature"),
    (["--prompt", "hi", "--temperature", "warm"], "temperature"),
    (["--prompt", "hi", "--temperature", "nan"], "temperature"),
    (["--prompt", "hi", "--top-p", "0"], "top-p"),
    (["--prompt", "hi", "--top-p", "2"], "top-p"),
    (["--prompt", "hi", "--top-k", "-3"], "top-k"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "max-new-tokens"),
    (["--prompt", "hi", "--method", "nope"], "method"),
    (["--prompt", "hi", "--target", "nobody-here/no-such-model"], "offline"),
    (["--prompt", "hi", "--device", "cuda"], "cuda"),
])
def test_cli_bad_input_exits_2_with_one_line(args, fragment):
    if fragment == "cuda":
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    assert_one_line_error(run_cli("generate", *args, env={"HF_HUB_OFFLINE": "1"}), fragment)


def test_cli_errors_that_need_the_model(default_target, foreign_models):
    long_prompt = "word " * 9000
    assert_one_line_error(run_cli("generate", "--prompt", long_prompt), "longer than the model's context")
    assert_one_line_error(run_cli("generate", "--prompt", "hi", "--max-new-tokens", "9000"), "beyond the context")
    assert_one_line_error(run_cli("generate", "--prompt", "hi", "--method", "draft", "--draft",
                                  foreign_models["other_vocab"]), "differs from the target")
    assert_one_line_error(run_cli("generate", "--prompt", "hi", "--target", foreign_models["encoder"]),
                          "not a causal language model")
    assert_one_line_error(run_cli("bench", "--prompts", "/no/such.jsonl", "--out", "/tmp/x.json"), "does not exist")
