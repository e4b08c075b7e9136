"""Sampled output is the target's distribution, end to end, for every method that drafts: chains and trees,
plain temperature, top-k and top-p. Each scenario samples the engine RUNS times on a tiny random model
(vocabulary 6, so the exact joint distribution of the first two new tokens is cheap to enumerate) and
tests the first two tokens against it (specviz.measure.exactness_check). Runs generate two tokens more than are tested,
so that the steps that decide them draft gamma tokens (a run of exactly two tokens drafts at most one).

The controls show the test has power at this size: the same engine at 0.85 of the temperature (total
variation ~0.09 from the target, measured below), and a verifier that resamples from p instead of the
residual, must both fail it.

The chains of the methods decode_batch drafts (a draft model, the lookups) draw their runs through the batched
engine (stats.sample_batched: each row is its seed's single run, checked token for token on some seeds); trees,
draft stops and the drafters that read the target's hidden states run one after another (sample_outputs).

EAGLE-3 (three target layers, its own output layer over a draft vocabulary) runs on a 4-layer target of the same
kind, with a tenth of the runs (EAGLE3_RUNS: the suite's time), so its control is a larger bias: the engine at
half the temperature (total variation 0.23 from the target on that model). DFlash's block drafter (two target
layers read, its q at each position of the block) runs there too, with DFLASH_RUNS runs, as a chain and as
DDTree's tree, with the same control."""
import dataclasses

import pytest
import torch

from specviz import DecodeSettings
from specviz.rule.wrong_verifiers import verify_sampled_without_residual
from specviz.proposers.datastore import Datastore
from specviz.measure.exactness_check import goodness_of_fit, sample_outputs, target_distribution
from specviz.proposers import (AdaptiveProposer, EagleProposer, EarlyExitDrafter, MedusaProposer, ModelDrafter,
                               NgramProposer, RetrievalProposer)
from specviz.proposers.dflash import DFlashProposer
from specviz.proposers.distilled import build_draft_model, draft_config, start_from_target
from specviz.proposers.early_exit import truncated_view
from specviz.engine.batch_draft import ModelDrafting
from specviz.models.testing import perturbed_copy, tiny_causal_lm

from stats import ALPHA, assert_fits_or_fails, fit_at, sample_batched
from random_drafters import random_dflash, random_eagle, random_eagle3, random_medusa

VOCAB = 6
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # repeats, so that lookups find matches
DEPTH = 2
RUNS = 3000
TREE = 6

pytestmark = pytest.mark.stats

WARPS = {
    "temperature": DecodeSettings(temperature=1.0),
    "top-k": DecodeSettings(temperature=0.8, top_k=3),
    "top-p": DecodeSettings(temperature=1.2, top_p=0.8),
}


@pytest.fixture(scope="module")
def target():
    return tiny_causal_lm(vocab_size=VOCAB, seed=10, sharpness=2.0)


@pytest.fixture(scope="module")
def makers(target):
    drafter = perturbed_copy(target, noise=1.0, seed=11)
    draft_vocab = torch.tensor([0, 2, 3, 5])  # q is zero on tokens 1 and 4: the residual must still reach them
    medusa = random_medusa(target, heads=3, seed=3, token_ids=draft_vocab)
    eagle = random_eagle(target, seed=3, token_ids=draft_vocab)
    distilled = build_draft_model(target.model, draft_config(target.model.config, 1), draft_vocab)
    start_from_target(distilled, target.model, [0])  # one of the target's two layers: q near p, not equal
    store = Datastore.from_texts([[1, 2, 4, 5], [2, 0, 3, 3], [3, 1, 1, 2, 5]], VOCAB)
    makers = {
        "draft": lambda: ModelDrafter(drafter.model, VOCAB),
        "distilled": lambda: ModelDrafter(distilled, VOCAB),
        "ngram": lambda: NgramProposer(min_ngram=1),
        "retrieval": lambda: RetrievalProposer(store),
        "early-exit": lambda: EarlyExitDrafter(target.model, VOCAB, 1),
        "medusa": lambda: MedusaProposer(medusa),
        "eagle": lambda: EagleProposer(eagle),
        "adaptive": lambda: AdaptiveProposer(EagleProposer(eagle), lookup=NgramProposer(min_ngram=1)),
    }
    # what decode_batch drafts each batchable method's chains with: the draft model itself, or one lookup a row
    batched = {
        "draft": ModelDrafting(drafter.model, VOCAB),
        "distilled": ModelDrafting(distilled, VOCAB),
        "early-exit": ModelDrafting(truncated_view(target.model, 1), VOCAB),
        "ngram": makers["ngram"],
        "retrieval": makers["retrieval"],
    }
    return {name: (make, batched.get(name)) for name, make in makers.items()}


def settings_for(warp: str, tree: int) -> DecodeSettings:
    return dataclasses.replace(WARPS[warp], gamma=3, tree=tree, max_new_tokens=DEPTH + 2, stop_at_eos=False)


def fit_of(target, maker, settings, verifier=None, exact_settings=None):
    """The method's RUNS runs against the exact distribution; maker: (its proposer factory, what decode_batch
    drafts it with or None). Chains without a draft stop go through the batch where the method batches."""
    make, drafting = maker
    exact = target_distribution(target, PROMPT, exact_settings or settings, DEPTH, RUNS)
    if drafting is not None and not settings.tree and not settings.draft_stop:
        samples = sample_batched(target, drafting, make, PROMPT, settings, DEPTH, RUNS, verifier=verifier)
    else:
        samples = sample_outputs(target, make, PROMPT, settings, DEPTH, RUNS, verifier=verifier)
    return goodness_of_fit(samples.counts, exact, RUNS), samples


SCENARIOS = [
    *[(method, 0, "temperature")
      for method in ("draft", "distilled", "ngram", "retrieval", "early-exit", "medusa", "eagle", "adaptive")],
    *[(method, TREE, "temperature") for method in ("ngram", "retrieval", "medusa", "eagle", "adaptive")],
    ("draft", 0, "top-k"), ("medusa", 0, "top-k"), ("ngram", TREE, "top-k"), ("eagle", TREE, "top-k"),
    ("draft", 0, "top-p"), ("distilled", 0, "top-p"), ("eagle", 0, "top-p"), ("retrieval", 0, "top-p"), ("medusa", TREE,
                                                                                                         "top-p"),
]


@pytest.mark.parametrize("method,tree,warp", SCENARIOS,
                         ids=[f"{m}-{'tree' if t else 'chain'}-{w}" for m, t, w in SCENARIOS])
def test_sampled_output_has_the_target_distribution(target, makers, method, tree, warp):
    fit, samples = fit_of(target, makers[method], settings_for(warp, tree))
    assert samples.drafted > 0 and 0 < samples.accepted < samples.drafted  # it speculated, and was rejected
    if tree:
        assert samples.tree_steps > 0  # it really verified trees
    assert fit.p_value >= ALPHA, f"p = {fit.p_value:.2g} (chi-square {fit.statistic:.1f}, dof {fit.dof})"


@pytest.mark.parametrize("method", ["draft", "distilled"])
def test_a_draft_that_ends_where_its_drafter_doubts_keeps_the_target_distribution(target, makers, method):
    """settings.draft_stop ends a draft model's chain after a token it gives less than that probability: the
    length depends on the draft alone, never on the target, so the output keeps the target's distribution."""
    settings = dataclasses.replace(settings_for("temperature", 0), draft_stop=0.5)
    fit, samples = fit_of(target, makers[method], settings)
    full = sample_outputs(target, makers[method][0], PROMPT, settings_for("temperature", 0), DEPTH, RUNS // 10)
    assert samples.drafted / RUNS < 0.9 * full.drafted / (RUNS // 10)  # the stop ended drafts early
    assert 0 < samples.accepted < samples.drafted
    assert fit.p_value >= ALPHA, f"p = {fit.p_value:.2g} (chi-square {fit.statistic:.1f}, dof {fit.dof})"


@pytest.mark.parametrize("method,tree", [("draft", 0), ("ngram", 0), ("eagle", TREE)],
                         ids=["drafter-with-q", "one-hot-lookup", "tree"])
def test_a_slightly_cooler_sampler_fails_the_test(target, makers, method, tree):
    """The control: the engine is exact at 0.85 of the temperature, so it fails a test against the target's
    distribution at the full temperature."""
    settings = settings_for("temperature", tree)
    cooler = dataclasses.replace(settings, temperature=0.85 * settings.temperature)
    fit, _ = fit_of(target, makers[method], cooler, exact_settings=settings)
    assert fit.p_value < ALPHA, f"the control passed: p = {fit.p_value:.2g}"


@pytest.mark.parametrize("method", ["draft", "ngram"], ids=["drafter-with-q", "one-hot-lookup"])
def test_a_verifier_without_the_residual_fails_the_test(target, makers, method):
    fit, _ = fit_of(target, makers[method], settings_for("temperature", 0), verifier=verify_sampled_without_residual)
    assert fit.p_value < ALPHA, f"the wrong verifier passed: p = {fit.p_value:.2g}"


def test_the_control_is_a_small_bias(target):
    """Total variation between the target's first two tokens at temperature 1 and at 0.85: the size of the
    bias the controls show the test catches."""
    full = target_distribution(target, PROMPT, WARPS["temperature"], DEPTH, RUNS, min_expected=0)
    cooler = target_distribution(target, PROMPT, DecodeSettings(temperature=0.85), DEPTH, RUNS, min_expected=0)
    distance = 0.5 * sum(abs(full[k] - cooler.get(k, 0.0)) for k in full)
    assert 0.03 < distance < 0.12


EAGLE3_RUNS = 150


@pytest.fixture(scope="module")
def deep_target():
    """`target`'s kind with 4 layers: an EAGLE-3 drafter reads three of them before the last."""
    return tiny_causal_lm(vocab_size=VOCAB, seed=10, sharpness=2.0, layers=4)


@pytest.fixture(scope="module")
def make_eagle3(deep_target):
    drafter = random_eagle3(deep_target, seed=3, token_ids=torch.tensor([0, 2, 3, 5]))  # q zero on 1 and 4
    return lambda: EagleProposer(drafter)


@pytest.mark.parametrize("temperature", [1.0, 0.5], ids=["exact", "control-at-half-the-temperature"])
def test_eagle3_samples_the_target_distribution_and_a_cooler_sampler_fails(deep_target, make_eagle3, temperature):
    settings = settings_for("temperature", 0)
    fit, samples = fit_at(deep_target, make_eagle3, PROMPT, settings, temperature, DEPTH, EAGLE3_RUNS)
    assert samples.drafted > 0 and 0 < samples.accepted < samples.drafted
    assert_fits_or_fails(fit, exact=temperature == settings.temperature)


DFLASH_RUNS = 600  # a drafter of two layers over a block: four times EAGLE-3's runs cost a few seconds


@pytest.fixture(scope="module")
def make_dflash(deep_target):
    drafter = random_dflash(deep_target, mask_token_id=VOCAB - 1, seed=3, token_ids=torch.tensor([0, 2, 3, 5]))
    return lambda: DFlashProposer(drafter)


@pytest.mark.parametrize("tree,temperature", [(0, 1.0), (TREE, 1.0), (0, 0.5)],
                         ids=["chain", "tree", "control-at-half-the-temperature"])
def test_dflash_samples_the_target_distribution_and_a_cooler_sampler_fails(deep_target, make_dflash, tree,
                                                                         temperature):
    settings = settings_for("temperature", tree)
    fit, samples = fit_at(deep_target, make_dflash, PROMPT, settings, temperature, DEPTH, DFLASH_RUNS)
    assert samples.drafted > 0 and 0 < samples.accepted < samples.drafted
    assert bool(samples.tree_steps) == bool(tree)  # the tree case really verified trees
    assert_fits_or_fails(fit, exact=temperature == settings.temperature)
