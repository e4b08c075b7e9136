"""The golden test on the real offline default model (SmolLM2-135M-Instruct, float32, CPU): speculative
greedy output is token for token plain greedy output, for every method and gamma."""
import pytest

from specviz import DecodeSettings, TokenKind, load_model
from specviz.api import encode, make_proposer, run_once
from specviz.proposers import PlainProposer

PASSAGE = (
    "The history of the bicycle spans more than two centuries. Early designs, called draisines or running "
    "machines, had no pedals: riders pushed along the ground with their feet. In the 1860s, French makers "
    "attached pedals to the front wheel, producing the velocipede, nicknamed the boneshaker for its rough ride "
    "on cobbled streets. The high-wheeler followed, whose large front wheel let each turn of the pedals carry "
    "the rider further, at the price of dangerous falls. The safety bicycle of the 1880s, with two wheels of "
    "equal size and a chain driving the rear wheel, made cycling practical for many more people, and the "
    "pneumatic tyre soon made it comfortable. "
)
PROMPTS = {
    "short": "What is the capital of France? Answer in one sentence.",
    "code": "Write a Python function that checks whether a number is prime, with a docstring.",
    "long": PASSAGE * 6 + "\nSummarize the text above in three sentences, repeating its key phrases.",
}
MAX_NEW = 32


@pytest.fixture(scope="module")
def plain_outputs(default_target):
    settings = DecodeSettings(max_new_tokens=MAX_NEW)
    return {name: run_once(default_target, PlainProposer(), encode(default_target, text), settings).token_ids
            for name, text in PROMPTS.items()}


@pytest.fixture(scope="module")
def draft_model(default_draft_folder):
    return load_model(default_draft_folder, device="cpu", dtype="float32")


def test_long_prompt_is_long(default_target):
    assert len(encode(default_target, PROMPTS["long"])) > 700


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("method", ["draft", "ngram", "early-exit", "adaptive"])
def test_golden_greedy_equals_plain(default_target, draft_model, plain_outputs, method, gamma):
    settings = DecodeSettings(max_new_tokens=MAX_NEW, gamma=gamma)
    drafted = rejected = 0
    for name, text in PROMPTS.items():
        proposer = make_proposer(method, default_target, draft_model)
        result = run_once(default_target, proposer, encode(default_target, text), settings)
        assert result.token_ids == plain_outputs[name], f"{method} gamma={gamma} differs from plain on {name!r}"
        drafted += result.metrics.drafted
        rejected += result.metrics.drafted - result.metrics.accepted
    if method in ("draft", "ngram", "early-exit"):
        assert drafted > 0 and rejected > 0  # the run really went through rejections and rollbacks


def test_target_as_draft_model_accepts_all(default_target):
    ids = encode(default_target, PROMPTS["code"])
    proposer = make_proposer("draft", default_target, default_target)
    result = run_once(default_target, proposer, ids, DecodeSettings(max_new_tokens=24, gamma=4))
    assert result.metrics.acceptance_rate == 1.0
    assert result.metrics.mean_accepted_length > 4


def test_token_texts_join_to_the_text_with_multibyte_characters(default_target):
    ids = encode(default_target, "Écris trois mots en japonais avec leurs traductions: 日本語, 東京, 🍣.")
    result = run_once(default_target, make_proposer("ngram", default_target), ids,
                      DecodeSettings(max_new_tokens=40, gamma=3))
    emitted = [t for t in result.tokens if t.kind != TokenKind.REJECTED]
    assert "".join(t.text for t in emitted) == result.text
    assert any(ord(ch) > 0x3000 for ch in result.text)  # it did write multi-byte characters


def test_sampling_with_top_k_top_p_is_reproducible(default_target, draft_model):
    ids = encode(default_target, PROMPTS["short"])
    settings = DecodeSettings(max_new_tokens=24, gamma=3, temperature=0.8, top_k=50, top_p=0.9, seed=3)
    first = run_once(default_target, make_proposer("draft", default_target, draft_model), ids, settings)
    second = run_once(default_target, make_proposer("draft", default_target, draft_model), ids, settings)
    assert first.token_ids == second.token_ids
    for step in first.steps:
        for position in step.positions:
            if position.reached and position.q is not None:
                assert position.accept_prob == pytest.approx(min(1.0, position.p / position.q), rel=1e-3)
