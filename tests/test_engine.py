"""The engine on tiny random transformers models: exact greedy equality, caches that equal a fresh prefill
after rejections, consistent step records, end-of-sequence accounting."""
import dataclasses

import pytest
import torch

from specviz import DecodeSettings, SpeculativeRun, TokenKind
from specviz.api import make_proposer, run_once
from specviz.proposers import ModelDrafter, PlainProposer
from specviz.runners.causal import CausalRunner, layer_keys_values
from specviz.models.testing import perturbed_copy, tiny_causal_lm

PROMPT = [3, 7, 1, 3, 7, 2, 9, 3, 7]  # repeats, so that n-gram lookup finds matches


METHODS = ["draft", "ngram", "early-exit", "adaptive"]


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("method", METHODS)
def test_greedy_speculative_equals_plain_greedy(tiny_target, tiny_drafter, method, gamma):
    settings = DecodeSettings(max_new_tokens=48, gamma=gamma)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, make_proposer(method, tiny_target, tiny_drafter), PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert len(result.token_ids) == 48
    if method in ("draft", "ngram"):
        assert result.metrics.drafted > 0  # it really speculated
        assert result.metrics.accepted < result.metrics.drafted  # and rejections happened


def test_a_draft_model_that_stops_where_it_doubts_drafts_less_and_keeps_plain_output(tiny_target, tiny_drafter):
    """settings.draft_stop ends a chain after a token the drafter gives less than that probability: fewer
    tokens drafted, a larger share of them accepted, the same greedy output."""
    settings = DecodeSettings(max_new_tokens=48, gamma=6)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    full = run_once(tiny_target, make_proposer("draft", tiny_target, tiny_drafter), PROMPT, settings)
    stopped = run_once(tiny_target, make_proposer("draft", tiny_target, tiny_drafter), PROMPT,
                       dataclasses.replace(settings, draft_stop=0.5))
    assert stopped.token_ids == full.token_ids == plain.token_ids
    early = lambda steps: [s for s in steps if s.total_emitted <= 40]  # noqa: E731  not cut by max_new_tokens
    assert all(s.gamma == 6 for s in early(full.steps))  # control: without the stop, every chain is full
    assert any(0 < s.gamma < 6 for s in early(stopped.steps))
    # the records say which chains the drafter cut, and it doubted their last token
    assert all(s.doubted == (s.gamma < 6) for s in early(stopped.steps))
    assert all(s.positions[-1].q < 0.5 for s in early(stopped.steps) if s.doubted)
    assert not any(s.doubted for s in full.steps)
    assert stopped.metrics.drafted < full.metrics.drafted
    assert stopped.metrics.acceptance_rate > full.metrics.acceptance_rate


def test_doubts_reads_the_drafters_own_probability_of_its_token():
    from specviz.proposers.draft_model import doubts

    logits = torch.log(torch.tensor([0.6, 0.3, 0.1]))
    assert not doubts(logits, 0, 0.5) and doubts(logits, 1, 0.5)
    assert not doubts(logits, 2, 0.0)  # 0: the stop is off


def test_greedy_equality_on_another_architecture_size():
    target = tiny_causal_lm(vocab_size=50, seed=3, layers=4, hidden=64)
    drafter = perturbed_copy(target, noise=0.8, seed=4)
    settings = DecodeSettings(max_new_tokens=60, gamma=3)
    plain = run_once(target, PlainProposer(), PROMPT, settings)
    for method in METHODS:
        assert run_once(target, make_proposer(method, target, drafter), PROMPT, settings).token_ids == plain.token_ids


def test_target_as_its_own_drafter_accepts_everything(tiny_target):
    result = run_once(tiny_target, make_proposer("draft", tiny_target, tiny_target), PROMPT,
                      DecodeSettings(max_new_tokens=40, gamma=4))
    assert result.metrics.acceptance_rate == 1.0
    assert all(s.next_token.kind in (TokenKind.BONUS, TokenKind.ACCEPTED) for s in result.steps if s.gamma)


@pytest.mark.parametrize("fast", ["1", "0"], ids=["static-cache", "transformers-cache"])
def test_caches_equal_fresh_prefill_after_rejections(tiny_target, tiny_drafter, fast, monkeypatch):
    monkeypatch.setenv("SPECVIZ_FAST", fast)
    proposer = ModelDrafter(tiny_drafter.model, tiny_target.vocab_size)
    run = SpeculativeRun(tiny_target, proposer, PROMPT, DecodeSettings(max_new_tokens=40, gamma=4))
    rejections = 0
    for step in run:
        rejections += step.n_accepted < step.gamma
        sequence = run.tokens
        # target: every accepted token but the last
        assert run.runner.length == sequence.shape[0] - 1
        fresh = CausalRunner(tiny_target.model)
        fresh.forward(sequence[:-1])
        assert type(run.runner).__name__ == ("StaticRunner" if fast == "1" else "CausalRunner")
        for (k, v), (k0, v0) in zip(run.runner.layer_keys_values(), layer_keys_values(fresh.cache)):
            torch.testing.assert_close(k, k0, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(v, v0, rtol=1e-5, atol=1e-5)
        # drafter: a prefix of the accepted sequence, nothing rejected left in it
        cached = proposer.cached_ids
        assert cached == sequence[: len(cached)].tolist()
        fresh = CausalRunner(tiny_drafter.model)
        fresh.forward(torch.tensor(cached))
        for (k, v), (k0, v0) in zip(proposer.runner.layer_keys_values(), layer_keys_values(fresh.cache)):
            torch.testing.assert_close(k, k0, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(v, v0, rtol=1e-5, atol=1e-5)
    assert rejections >= 3


def test_records_are_consistent(tiny_target, tiny_drafter):
    settings = DecodeSettings(max_new_tokens=30, gamma=3, temperature=0.8, seed=5)
    run = SpeculativeRun(tiny_target, make_proposer("draft", tiny_target, tiny_drafter), PROMPT, settings)
    steps = list(run)
    result = run.result
    emitted = [t for t in result.tokens if t.kind != TokenKind.REJECTED]
    assert [t.id for t in emitted] == result.token_ids
    assert "".join(t.text for t in emitted) == result.text
    for step in steps:
        assert len(step.positions) == step.gamma
        assert sum(p.accepted for p in step.positions) == step.n_accepted
        for position in step.positions:
            assert 0 <= position.accept_prob <= 1
            assert len(position.p_top.ids) == min(20, tiny_target.vocab_size)
            if position.reached:
                assert position.accepted == (position.u < position.accept_prob)
                assert position.accept_prob == pytest.approx(min(1.0, position.p / position.q), rel=1e-4)
        kinds = [t.kind for t in step.tokens]
        assert kinds[-1] == (TokenKind.BONUS if step.n_accepted == step.gamma else TokenKind.RESAMPLED)
        assert step.draft_ms >= 0 and step.verify_ms > 0
    metrics = result.metrics
    assert metrics.drafted == sum(s.gamma for s in steps)
    assert metrics.accepted == sum(s.n_accepted for s in steps)
    assert metrics.mean_accepted_length == pytest.approx(metrics.new_tokens / metrics.target_forwards)
    assert metrics.target_forwards == len(steps)
    assert metrics.per_position_acceptance[0] == pytest.approx(sum(s.n_accepted >= 1 for s in steps) / len(steps))
    assert all(a >= b for a, b in zip(metrics.per_position_acceptance, metrics.per_position_acceptance[1:]))


def test_same_seed_same_output_other_seed_differs(tiny_target, tiny_drafter):
    def sample(seed):
        settings = DecodeSettings(max_new_tokens=30, gamma=3, temperature=1.0, seed=seed)
        return run_once(tiny_target, make_proposer("draft", tiny_target, tiny_drafter), PROMPT, settings).token_ids
    assert sample(11) == sample(11)
    assert sample(11) != sample(12)


def test_stops_at_eos_like_plain(tiny_target, tiny_drafter):
    plain_free = run_once(tiny_target, PlainProposer(), PROMPT, DecodeSettings(max_new_tokens=40))
    eos = plain_free.token_ids[17]
    tiny_target.model.generation_config.eos_token_id = eos
    try:
        settings = DecodeSettings(max_new_tokens=40, gamma=4)
        plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
        result = run_once(tiny_target, make_proposer("draft", tiny_target, tiny_drafter), PROMPT, settings)
    finally:
        tiny_target.model.generation_config.eos_token_id = None
    assert plain.stop_reason == result.stop_reason == "eos"
    assert result.token_ids == plain.token_ids
    assert result.token_ids[-1] == eos and eos not in result.token_ids[:-1]


@pytest.mark.parametrize("detail", [True, False], ids=["app-records", "bench-records"])
def test_drafts_accepted_after_an_eos_are_not_counted(tiny_target, detail):
    """The target drafting for itself accepts every draft: 4 drafts and a bonus a step, output tokens
    5k .. 5k + 4 in step k. An EOS at the first or second draft of a step ends the output there; the drafts
    after it, which the target accepted too, are not part of the output and do not count as accepted."""
    plain = run_once(tiny_target, PlainProposer(), PROMPT, DecodeSettings(max_new_tokens=40)).token_ids
    at = next(i for i in range(10, 40) if i % 5 in (0, 1) and plain[i] not in plain[:i])
    step, kept = at // 5, at % 5 + 1  # the step the EOS falls in; drafts of that step the output keeps
    tiny_target.model.generation_config.eos_token_id = plain[at]
    try:
        run = SpeculativeRun(tiny_target, make_proposer("draft", tiny_target, tiny_target), PROMPT,
                             DecodeSettings(max_new_tokens=40, gamma=4), detail=detail)
        steps = list(run)
    finally:
        tiny_target.model.generation_config.eos_token_id = None
    result, last = run.result, steps[-1]
    assert result.token_ids == plain[:at + 1] and result.stop_reason == "eos"
    assert len(steps) == step + 1 and last.gamma == 4
    assert last.n_accepted == kept and last.emitted == kept
    assert [p.accepted for p in last.positions] == [i < kept for i in range(4)]
    assert [p.reached for p in last.positions] == [i < kept for i in range(4)]
    assert [t.kind for t in last.tokens] == [TokenKind.ACCEPTED] * kept  # no bonus, nothing struck after the EOS
    metrics = result.metrics
    assert metrics.drafted == 4 * (step + 1) and metrics.accepted == 4 * step + kept
    assert metrics.acceptance_rate == pytest.approx((4 * step + kept) / (4 * (step + 1)))
    assert metrics.mean_accepted_length == pytest.approx((at + 1) / (step + 1))  # what the output kept, per forward
    last_share = lambda i: (step + (i < kept)) / (step + 1)  # noqa: E731
    assert metrics.per_position_acceptance == pytest.approx([last_share(i) for i in range(4)])


SAMPLE_PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


OUTPUTS = 2


RUNS = 3000


def exact_joint(target, prompt, outputs):
    """p(t1, t2 | prompt) from the target's real forward passes."""
    with torch.no_grad():
        first = target.model(torch.tensor([prompt])).logits[0, -1].softmax(-1)
        probs = {}
        for a in range(first.shape[0]):
            second = target.model(torch.tensor([prompt + [a]])).logits[0, -1].softmax(-1)
            for b in range(second.shape[0]):
                probs[(a, b)] = float(first[a] * second[b])
    return probs


def test_lean_records_give_the_same_run(tiny_target, tiny_drafter):
    settings = DecodeSettings(max_new_tokens=30, gamma=3)
    runs = {}
    for detail in (True, False):
        run = SpeculativeRun(tiny_target, make_proposer("draft", tiny_target, tiny_drafter), PROMPT, settings,
                             detail=detail)
        list(run)
        runs[detail] = run.result
    full, lean = runs[True], runs[False]
    assert lean.token_ids == full.token_ids and lean.text == full.text
    assert [(s.gamma, s.n_accepted, s.emitted) for s in lean.steps] == [(s.gamma, s.n_accepted, s.emitted)
                                                                        for s in full.steps]
    assert [t.kind for t in lean.tokens] == [t.kind for t in full.tokens]
    assert lean.metrics.mean_accepted_length == full.metrics.mean_accepted_length
