"""Sampling in the device loop (device_loop.py): its warping is sampling.warp_probs, its sampled tree walk
emits the target's distribution, and its runs, chains and trees of every drafter that drafts on the device,
with temperature, top-k, top-p and a draft stop, have the target's distribution end to end
(specviz.measure.exactness_check, on the tiny random model of test_sampling_exactness.py), run here on the CPU, eagerly
(SPECVIZ_DEVICE_LOOP=force).

The controls: the device loop at 0.85 of the temperature, and its verifier that resamples from p instead of the
residual (the device's verify_sampled_without_residual), must fail the same test. EAGLE-3's chain runs with a
tenth of the runs on a 4-layer target (test_sampling_exactness.py has its control at that size), DFlash's chain and
tree with a fifth, with a control of their own: the device loop at half the temperature."""
import dataclasses
from collections import Counter

import pytest
import torch

from specviz import DecodeSettings
from specviz.api import run_once
from specviz.measure.exactness_check import goodness_of_fit, sample_outputs, target_distribution
from specviz.proposers import EagleProposer, MedusaProposer, ModelDrafter, NgramProposer, RetrievalProposer
from specviz.proposers.distilled import build_draft_model, draft_config, start_from_target
from specviz.proposers.datastore import Datastore
from specviz.rule.sampling import drafter_pick, draw_with_noise, warp_probs, warp_with
from specviz.models.testing import perturbed_copy, tiny_causal_lm
from specviz.rule.tree_device import tree_layout, walk_tree_sampled
from specviz.rule.wrong_verifiers import verify_sampled_without_residual

from stats import ALPHA, assert_fits_or_fails, fit_at
from random_drafters import random_dflash, random_eagle, random_eagle3, random_medusa

VOCAB = 6
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]
DEPTH = 2
RUNS = 3000
TREE = 6


@pytest.mark.quick
@pytest.mark.parametrize("settings", [DecodeSettings(temperature=0.7), DecodeSettings(temperature=1.3, top_k=5),
                                      DecodeSettings(temperature=0.9, top_p=0.8),
                                      DecodeSettings(temperature=1.0, top_k=20, top_p=0.6)])
def test_warping_with_tensors_is_warp_probs(settings):
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 3
    filtered = settings.top_k > 0 or settings.top_p < 1
    probs = warp_with(logits, torch.tensor(settings.temperature), torch.tensor(settings.top_k),
                      torch.tensor(settings.top_p), filtered)
    assert torch.allclose(probs, warp_probs(logits, settings), atol=1e-7)


@pytest.mark.quick
def test_a_draw_with_exponential_noise_has_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    generator = torch.Generator().manual_seed(1)
    noise = torch.empty(20_000, 5).exponential_(generator=generator)
    counts = Counter(draw_with_noise(probs.expand(20_000, 5), noise).tolist())
    assert counts[4] == 0
    fit = goodness_of_fit(counts, dict(enumerate(probs.tolist())), 20_000)
    assert fit.p_value >= ALPHA


@pytest.mark.quick
def test_a_drafter_over_a_draft_vocabulary_picks_and_spreads_q_over_the_targets_ids():
    """drafter_pick on scores over a draft vocabulary (token_ids): greedy, the argmax's target id, and with shown
    its softmax placed at those ids (zero elsewhere); sampled, a draw's target id and the warped scores so placed.
    The control: the scores' own indices are not the target's ids."""
    scores = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]])
    token_ids = torch.tensor([7, 2, 9])
    tokens, q, index = drafter_pick(scores, token_ids, 10, shown=True)
    assert tokens.tolist() == [2, 7] and index.tolist() == [1, 0]
    assert torch.allclose(q[:, [7, 2, 9]], scores.softmax(-1)) and q.sum(-1).allclose(torch.ones(2))
    assert q[:, [0, 1, 3, 4, 5, 6, 8]].abs().sum() == 0
    assert drafter_pick(scores, token_ids, 10)[1] is None  # greedy, not shown: no q
    warp = (torch.tensor(0.5), torch.tensor(2), torch.tensor(1.0), True)
    noise = torch.empty(2, 3).exponential_(generator=torch.Generator().manual_seed(0))
    tokens, q, index = drafter_pick(scores, token_ids, 10, warp, noise)
    assert torch.allclose(q[:, [7, 2, 9]], warp_with(scores, *warp))
    assert tokens.tolist() == token_ids[index].tolist() != index.tolist()
    whole, q_whole, _ = drafter_pick(scores, None, 4, shown=True)  # the target's first K ids
    assert whole.tolist() == [1, 0] and q_whole[:, 3].abs().sum() == 0


def test_the_sampled_tree_walk_emits_the_targets_first_token():
    """The walk's first emitted token (the first accepted node's, or the one drawn where the root's children were
    all rejected) has the root's distribution, whatever the tree; a walk that forgets to remove the rejected
    children from p (drawing from p itself) does not."""
    vocab, draws = 5, 4000
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4, 0.0], [0.25, 0.25, 0.25, 0.25, 0.0],
                          [0.0, 0.0, 0.5, 0.5, 0.0]])
    tokens, parents = torch.tensor([0, 1, 3]), torch.tensor([-1, -1, 0])  # two children of the root, one below
    nodes = tree_layout(tokens, parents, 3, 2)
    generator = torch.Generator().manual_seed(2)
    right, wrong = Counter(), Counter()
    for _ in range(draws):
        uniforms = torch.rand(3, generator=generator)
        noise = torch.empty(vocab).exponential_(generator=generator)
        accepted, path, left, _ = walk_tree_sampled(probs, nodes[0], nodes[1], nodes[3], nodes[2], uniforms, 2)
        first = int(tokens[path[0]]) if accepted else int(draw_with_noise(left, noise))
        right[first] += 1
        wrong[first if accepted else int(draw_with_noise(probs[0], noise))] += 1
    exact = dict(enumerate(probs[0].tolist()))
    assert goodness_of_fit(right, exact, draws).p_value >= ALPHA
    assert goodness_of_fit(wrong, exact, draws).p_value < ALPHA


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
    start_from_target(distilled, target.model, [0])
    store = Datastore.from_texts([[1, 2, 4, 5], [2, 0, 3, 3], [3, 1, 1, 2, 5]], VOCAB)
    return {
        "draft": lambda: ModelDrafter(drafter.model, VOCAB),
        "distilled": lambda: ModelDrafter(distilled, VOCAB),
        "ngram": lambda: NgramProposer(min_ngram=1),
        "retrieval": lambda: RetrievalProposer(store),
        "medusa": lambda: MedusaProposer(medusa),
        "eagle": lambda: EagleProposer(eagle),
    }


WARPS = {
    "temperature": DecodeSettings(temperature=1.0),
    "top-k": DecodeSettings(temperature=0.8, top_k=3),
    "top-p": DecodeSettings(temperature=1.2, top_p=0.8),
}


def settings_for(warp: str, tree: int, draft_stop: float = 0.0) -> DecodeSettings:
    return dataclasses.replace(WARPS[warp], gamma=3, tree=tree, max_new_tokens=DEPTH + 2, stop_at_eos=False,
                               draft_stop=draft_stop)


def device_fit(target, make, settings, monkeypatch, verifier=None, exact_settings=None):
    """The method sampled RUNS times on the device loop (checked on one run) against the exact distribution."""
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "force")
    probe = run_once(target, make(), PROMPT, dataclasses.replace(settings, seed=0), detail=False)
    assert probe.settings["loop"] == "device"
    exact = target_distribution(target, PROMPT, exact_settings or settings, DEPTH, RUNS)
    samples = sample_outputs(target, make, PROMPT, settings, DEPTH, RUNS, verifier=verifier)
    return goodness_of_fit(samples.counts, exact, RUNS), samples


# each device path once: a one-hot chain, chains with q (a draft model's over the whole vocabulary, with a draft
# stop over a draft vocabulary, EAGLE's and Medusa's over a draft vocabulary), a lookup's tree and two models'
# trees; temperature, top-k and top-p spread over them
SCENARIOS = [("retrieval", 0, "top-k", 0.0), ("draft", 0, "temperature", 0.0), ("distilled", 0, "temperature", 0.5),
             ("eagle", 0, "top-p", 0.0), ("medusa", 0, "temperature", 0.0), ("ngram", TREE, "top-k", 0.0),
             ("eagle", TREE, "temperature", 0.0), ("medusa", TREE, "top-p", 0.0)]


@pytest.mark.stats
@pytest.mark.parametrize("method,tree,warp,stop", SCENARIOS,
                         ids=[f"{m}-{'tree' if t else 'chain'}-{w}{'-stop' if s else ''}" for m, t, w, s in SCENARIOS])
def test_device_loop_samples_the_target_distribution(target, makers, monkeypatch, method, tree, warp, stop):
    fit, samples = device_fit(target, makers[method], settings_for(warp, tree, stop), monkeypatch)
    assert samples.drafted > 0 and 0 < samples.accepted < samples.drafted  # it speculated, and was rejected
    if tree:
        assert samples.tree_steps > 0
    assert fit.p_value >= ALPHA, f"p = {fit.p_value:.2g} (chi-square {fit.statistic:.1f}, dof {fit.dof})"


@pytest.mark.stats
@pytest.mark.parametrize("method,tree", [("eagle", TREE)], ids=["tree"])
def test_a_slightly_cooler_device_sampler_fails_the_test(target, makers, monkeypatch, method, tree):
    settings = settings_for("temperature", tree)
    cooler = dataclasses.replace(settings, temperature=0.85 * settings.temperature)
    fit, _ = device_fit(target, makers[method], cooler, monkeypatch, exact_settings=settings)
    assert fit.p_value < ALPHA, f"the control passed: p = {fit.p_value:.2g}"


@pytest.mark.stats
@pytest.mark.parametrize("method,tree", [("draft", 0)], ids=["drafter-with-q"])
def test_a_device_verifier_without_the_residual_fails_the_test(target, makers, monkeypatch, method, tree):
    fit, _ = device_fit(target, makers[method], settings_for("temperature", tree), monkeypatch,
                        verifier=verify_sampled_without_residual)
    assert fit.p_value < ALPHA, f"the wrong verifier passed: p = {fit.p_value:.2g}"


@pytest.mark.parametrize("method,tree", [("eagle", 0), ("ngram", TREE)])
def test_a_seed_reproduces_a_device_loop_run(target, makers, monkeypatch, method, tree):
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "force")
    settings = dataclasses.replace(settings_for("temperature", tree), max_new_tokens=24)
    runs = [run_once(target, makers[method](), PROMPT, dataclasses.replace(settings, seed=seed), detail=False)
            for seed in (5, 5, 6, 7)]
    assert all(run.settings["loop"] == "device" for run in runs)
    assert runs[0].token_ids == runs[1].token_ids
    assert len({tuple(run.token_ids) for run in runs}) == 3
    accepted = [[step.n_accepted for step in run.steps] for run in runs[:2]]
    assert accepted[0] == accepted[1]


EAGLE3_RUNS = 150


@pytest.mark.stats
def test_device_loop_samples_the_target_distribution_with_eagle3(monkeypatch):
    """EAGLE-3's chain on the device loop (three target layers handed over by the verify pass, a draft vocabulary
    with q zero on tokens 1 and 4), top-p."""
    target = tiny_causal_lm(vocab_size=VOCAB, seed=10, sharpness=2.0, layers=4)
    drafter = random_eagle3(target, seed=3, token_ids=torch.tensor([0, 2, 3, 5]))
    make = lambda: EagleProposer(drafter)  # noqa: E731
    settings = settings_for("top-p", 0)
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "force")
    assert run_once(target, make(), PROMPT, dataclasses.replace(settings, seed=0),
                    detail=False).settings["loop"] == "device"
    fit, samples = fit_at(target, make, PROMPT, settings, settings.temperature, DEPTH, EAGLE3_RUNS)
    assert samples.loops["device"] == EAGLE3_RUNS
    assert samples.drafted > 0 and 0 < samples.accepted < samples.drafted
    assert_fits_or_fails(fit, exact=True)


DFLASH_RUNS = 600


@pytest.mark.stats
@pytest.mark.parametrize("tree,temperature", [(0, 1.0), (TREE, 1.0), (0, 0.5)],
                         ids=["chain", "tree", "control-at-half-the-temperature"])
def test_device_loop_samples_the_target_distribution_with_dflash(monkeypatch, tree, temperature):
    """DFlash's block on the device loop (DFlashLookup: two target layers handed over by the verify pass, each
    drafted position drawn from its own q, a draft vocabulary with q zero on tokens 1 and 4), a chain and DDTree's
    tree; at half the temperature the same test must fail."""
    from specviz.proposers.dflash import DFlashProposer

    target = tiny_causal_lm(vocab_size=VOCAB, seed=10, sharpness=2.0, layers=4)
    drafter = random_dflash(target, mask_token_id=VOCAB - 1, seed=3, token_ids=torch.tensor([0, 2, 3, 5]))
    make = lambda: DFlashProposer(drafter)  # noqa: E731
    settings = settings_for("temperature", tree)
    run_settings = dataclasses.replace(settings, temperature=temperature)
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "force")
    assert run_once(target, make(), PROMPT, dataclasses.replace(run_settings, seed=0),
                    detail=False).settings["loop"] == "device"
    fit, samples = fit_at(target, make, PROMPT, settings, temperature, DEPTH, DFLASH_RUNS)
    assert samples.loops["device"] == DFLASH_RUNS
    assert samples.drafted > 0 and 0 < samples.accepted < samples.drafted
    assert bool(samples.tree_steps) == bool(tree)  # the tree case really verified trees
    assert_fits_or_fails(fit, exact=temperature == settings.temperature)
