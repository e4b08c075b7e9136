import pytest
import torch

from specviz.models.testing import perturbed_copy, tiny_causal_lm

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def default_target():
    """The real offline default model (SmolLM2-135M-Instruct), float32 on the CPU, loaded once."""
    from specviz import load_model

    return load_model("default", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_target():
    return tiny_causal_lm(vocab_size=32, seed=0)


@pytest.fixture(scope="session")
def tiny_drafter(tiny_target):
    return perturbed_copy(tiny_target, noise=0.5, seed=1)


@pytest.fixture(scope="session")
def default_draft_folder(default_target, tmp_path_factory):
    """A separate draft model in save_pretrained layout: the default model's first 4 layers, saved to a folder
    (it shares the vocabulary, disagrees often enough to exercise rejections)."""
    from transformers import AutoModelForCausalLM

    config = default_target.model.config.__class__.from_dict(default_target.model.config.to_dict())
    config.num_hidden_layers = 4
    config.quantization_config = None
    small = AutoModelForCausalLM.from_config(config)
    missing, unexpected = small.load_state_dict(default_target.model.state_dict(), strict=False)
    assert not missing
    folder = tmp_path_factory.mktemp("draft4")
    small.save_pretrained(folder)
    default_target.tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def foreign_models(tmp_path_factory):
    """Models specviz must refuse, as save_pretrained folders: a causal LM with another vocabulary (8 words),
    and a model that is not a causal LM."""
    from transformers import DistilBertConfig, DistilBertModel

    from specviz.models.testing import save_tiny_model, word_tokenizer

    tokenizer = word_tokenizer(8)
    other = save_tiny_model(tmp_path_factory.mktemp("other-vocab"), vocab_size=8, tokenizer=tokenizer)
    encoder = tmp_path_factory.mktemp("encoder")
    DistilBertModel(DistilBertConfig(vocab_size=8, dim=32, hidden_dim=64, n_layers=1, n_heads=2)).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    return {"other_vocab": other, "encoder": str(encoder)}
