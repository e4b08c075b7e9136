"""The tests' distribution assertion: specviz.measure.exactness_check's chi-square goodness-of-fit test at a 1e-4 level,
and the batched way of drawing a distribution test's samples."""
from __future__ import annotations

import dataclasses
from collections import Counter

from specviz.engine.batch import decode_batch
from specviz.engine.run import SpeculativeRun
from specviz.measure.exactness_check import Fit, Samples, goodness_of_fit, sample_outputs, target_distribution

ALPHA = 1e-4  # the tests are seeded, so a pass is reproducible; the level keeps false alarms rare

# rows decoded at once: on the CPU in float32 a row's products are bitwise the same alone or among up to 33 others
# (runners/onednn.py), so a row's output is its seed's single run
BATCH_WIDTH = 32
# seeds whose rows are also run through the single-sequence loop and compared token for token: rows of the first
# batch, the first refilled slots, and later ones
CHECKED_SEEDS = (0, 1, 31, 32, 33, 1000)


def assert_same_distribution(counts: Counter, probs: dict, draws: int) -> None:
    fit = goodness_of_fit(counts, probs, draws)
    assert fit.p_value >= ALPHA, (f"chi-square {fit.statistic:.1f} (dof {fit.dof}, p = {fit.p_value:.2g}): "
                                  "not the target's distribution")


def sample_batched(target, drafting, make_proposer, prompt_ids: list[int], settings, depth: int, runs: int,
                   verifier=None) -> Samples:
    """exactness_check.sample_outputs' samples (run i seeded i, its first `depth` tokens counted), drawn through the
    batched engine (decode_batch, BATCH_WIDTH rows at a time, a finished row's slot refilled): one forward serves
    a batch's rows instead of one run, several times faster on the tiny models. drafting: decode_batch's (a
    ModelDrafting, or a factory of lookups); make_proposer: the single-sequence loop's proposer of the same method.
    A row's output is its seed's single run: the rows of CHECKED_SEEDS are compared with SpeculativeRun token for
    token, so the samples are the single path's too and that path stays tested."""
    batch = decode_batch(target, drafting, [list(prompt_ids)] * runs, dataclasses.replace(settings, seed=0),
                         batch_size=BATCH_WIDTH, path="batched", verifier=verifier)
    assert batch.path == "batched" and len(batch.token_ids) == runs
    for seed in (seed for seed in CHECKED_SEEDS if seed < runs):
        run = SpeculativeRun(target, make_proposer(), prompt_ids, dataclasses.replace(settings, seed=seed),
                             verifier=verifier, detail=False)
        for _ in run:
            pass
        assert run.result.token_ids == batch.token_ids[seed], f"seed {seed}: the batch's row is not the single run"
    samples = Samples(Counter(tuple(ids[:depth]) for ids in batch.token_ids), drafted=batch.drafted,
                      accepted=batch.accepted)
    samples.loops["batched"] = runs
    return samples


def fit_at(target, make_proposer, prompt_ids: list[int], settings, temperature: float, depth: int,
           runs: int) -> tuple[Fit, Samples]:
    """`runs` runs one after another at `temperature` (sample_outputs), against the target's exact distribution
    at settings' own temperature: at another temperature, the control that the test must catch."""
    exact = target_distribution(target, prompt_ids, settings, depth, runs)
    samples = sample_outputs(target, make_proposer, prompt_ids, dataclasses.replace(settings, temperature=temperature),
                             depth, runs)
    return goodness_of_fit(samples.counts, exact, runs), samples


def assert_fits_or_fails(fit: Fit, exact: bool) -> None:
    """exact: the fit must pass; else (the control) it must fail."""
    if exact:
        assert fit.p_value >= ALPHA, f"p = {fit.p_value:.2g} (chi-square {fit.statistic:.1f}, dof {fit.dof})"
    else:
        assert fit.p_value < ALPHA, f"the control passed: p = {fit.p_value:.2g}"
