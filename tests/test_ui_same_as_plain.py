"""The run card's "same as plain?" row on hand-built runs: bit for bit in the exact mode, token for token without
it, and where a greedy run differs, plain's logit margin there and whether that can be rounding. No model."""
import math

import pytest
import torch

from specviz.api import Report, logit_margin
from specviz.records.metrics import summarize
from specviz.records.schema import DraftPosition, RunResult, StepRecord, TokenKind, TokenRecord, TopTokens
from specviz.rule.sampling import display_probs
from specviz.settings import DecodeSettings
from specviz.engine.step_records import top_tokens
from specviz.ui import render, view
from specviz.ui.readouts import compared

pytestmark = pytest.mark.quick

WORDS = [" The", " cat", " sat", " on", " the", " mat"]


def plain_step(index: int, token: int, text: str, probs: tuple[float, float]) -> StepRecord:
    record = TokenRecord(id=token, text=text, kind=TokenKind.TARGET, step=index, p=probs[0])
    return StepRecord(index=index, gamma=0, positions=[], n_accepted=0, next_token=record,
                      next_top=TopTokens([token, 999], list(probs)), tokens=[record], draft_ms=0.0, verify_ms=1.0,
                      elapsed_s=0.01 * (index + 1), emitted=1, total_emitted=index + 1)


def run(tokens: list[tuple[int, str]], probs: dict[int, tuple[float, float]] | None = None, dtype="bfloat16",
        exact=False, device="cuda:0") -> RunResult:
    """A greedy run of plain-shaped steps; probs: the top two probabilities at chosen output positions."""
    steps = [plain_step(i, t, text, (probs or {}).get(i, (0.9, 0.05))) for i, (t, text) in enumerate(tokens)]
    return RunResult(method="plain", prompt="p", prompt_tokens=3, text="".join(t for _, t in tokens),
                     token_ids=[t for t, _ in tokens], tokens=[t for s in steps for t in s.tokens], steps=steps,
                     metrics=summarize(steps, len(steps), 1.0, 0.1),
                     settings={"temperature": 0.0, "dtype": dtype, "device": device, "exact_forward": exact},
                     stop_reason="max_new_tokens")


def pair(margin: float, dtype="bfloat16", exact=False, device="cuda:0", differ_at: int | None = 3):
    """A speculative run and its plain baseline, differing at `differ_at` (None: identical), where plain's top
    two logits are `margin` apart."""
    plain_tokens = [(10 + i, w) for i, w in enumerate(WORDS)]
    spec_tokens = list(plain_tokens)
    if differ_at is not None:
        spec_tokens[differ_at] = (999, " a")
    second = 0.5 / (1 + math.exp(margin))  # p1 / p2 = exp(margin), the two sharing half the mass
    probs = {3: (0.5 - second, second)}
    return (run(spec_tokens, dtype=dtype, exact=exact, device=device),
            run(plain_tokens, probs, dtype=dtype, exact=exact, device=device))


def card(spec: RunResult, plain: RunResult) -> str:
    identical, difference, bit_for_bit = compared(spec, plain)
    return render.summary_html(spec.metrics, "eagle", plain.metrics, 1.5, identical, difference,
                               bit_for_bit=bit_for_bit)


def test_the_margin_is_the_gap_between_the_two_largest_logits_of_a_greedy_record():
    logits = torch.tensor([[2.0, 18.30, 18.267, -1.0, 5.0]])
    top = top_tokens(display_probs(logits, DecodeSettings(temperature=0.0)))[0]  # what a greedy record keeps
    record = plain_step(0, top.ids[0], "x", tuple(top.probs[:2]))
    assert logit_margin([record], 0) == pytest.approx(0.033, abs=1e-5)
    # the control: a sampled record's distribution is warped by its temperature, and its ratio is not the margin
    warped = top_tokens(display_probs(logits, DecodeSettings(temperature=0.5)))[0]
    assert math.log(warped.probs[0] / warped.probs[1]) == pytest.approx(0.066, abs=1e-5)
    assert logit_margin([record], 1) is None  # past the output: no record


def test_the_margin_of_a_drafted_position_comes_from_its_p_top():
    position = DraftPosition(token_id=5, text="a", q=None, p=0.6, accept_prob=1.0, u=None, accepted=True, reached=True,
                             p_top=TopTokens([5, 6], [0.6, 0.2]), q_top=None)
    bonus = TokenRecord(id=7, text="b", kind=TokenKind.BONUS, step=0)
    step = StepRecord(index=0, gamma=1, positions=[position], n_accepted=1, next_token=bonus,
                      next_top=TopTokens([7, 8], [0.8, 0.1]), tokens=[], draft_ms=0, verify_ms=0, elapsed_s=0,
                      emitted=2, total_emitted=2)
    assert logit_margin([step], 0) == pytest.approx(math.log(3))
    assert logit_margin([step], 1) == pytest.approx(math.log(8))
    lean = StepRecord(**{**step.__dict__, "next_top": TopTokens([], [])})
    assert logit_margin([lean], 1) is None  # a lean record has no distribution


def test_bit_for_bit_only_when_both_runs_were_in_the_exact_mode():
    out = card(*pair(0.03, exact=True, differ_at=None))
    assert "yes, bit for bit" in out and render.EXACT_NOTE in out
    token_for_token = card(*pair(0.03, exact=False, differ_at=None))  # the control: not in the exact mode
    assert "yes, token for token" in token_for_token and "bit for bit" not in token_for_token
    spec, plain = pair(0.03, differ_at=None)
    plain.settings["exact_forward"] = True  # one run in the mode is not enough
    assert "bit for bit" not in card(spec, plain)


def test_a_near_tie_in_bfloat16_is_rounding_not_the_method():
    out = card(*pair(0.031))
    assert "first difference at output token 3" in out
    assert "0.031 apart" in out and "near-tie" in out and "rounding, not the method" in out
    assert "the exact mode avoids it" in out  # on a GPU, where the mode exists
    on_cpu = card(*pair(0.031, device="cpu"))
    assert "rounding, not the method" in on_cpu and "exact mode" not in on_cpu


def test_a_wide_margin_is_not_called_rounding():
    out = card(*pair(4.2))
    assert "4.20 apart" in out and "NOT a near-tie" in out and "worth reporting" in out
    assert "rounding, not the method" not in out


def test_the_threshold_follows_the_dtype():
    assert "rounding, not the method" in card(*pair(0.4, dtype="bfloat16"))
    assert "NOT a near-tie" in card(*pair(0.4, dtype="float16"))  # 3 bits finer: 0.4 is wide there
    assert "rounding, not the method" in card(*pair(0.05, dtype="float16"))
    assert "NOT a near-tie" in card(*pair(0.01, dtype="float32"))
    unknown = card(*pair(0.01, dtype="float64"))  # no claim for a dtype not listed
    assert "0.010 apart" in unknown and "rounding" not in unknown and "NOT" not in unknown


def test_a_difference_inside_the_exact_mode_is_never_rounding():
    out = card(*pair(0.01, exact=True))
    assert "both runs in the exact mode, so not rounding" in out and "worth reporting" in out
    assert "rounding, not the method" not in out and "bit for bit" not in out


def test_without_a_recorded_margin_no_cause_is_claimed():
    spec, plain = pair(0.01)
    plain.steps[3].next_top = TopTokens([], [])
    out = card(spec, plain)
    assert "first difference at output token 3" in out and "apart" not in out and "rounding" not in out


def test_the_note_is_escaped():
    spec, plain = pair(0.01)
    spec.tokens[3].text = "<img src=x onerror=alert(1)>"
    out = card(spec, plain)
    assert "<img" not in out and "&lt;img" in out


def test_the_api_report_carries_the_margin_where_greedy_runs_differ():
    spec, plain = pair(0.031)
    data = Report(spec, plain).to_dict()
    assert data["first_difference"] == 3 and data["first_difference_margin"] == pytest.approx(0.031)
    same = Report(*pair(0.031, differ_at=None)).to_dict()
    assert same["identical_to_plain"] and same["first_difference_margin"] is None
    sampled = pair(0.031)
    sampled[0].settings["temperature"] = 0.8
    assert Report(*sampled).to_dict()["first_difference_margin"] is None  # sampling: no claim of identity


def test_difference_cause_in_order_of_precedence():
    d = view.FirstDifference(3, " a", " the", margin=0.01, dtype="bfloat16", exact=False)
    assert view.difference_cause(d) == "rounding"
    assert view.difference_cause(view.FirstDifference(3, " a", " the", 0.01, "bfloat16", exact=True)) == "exact"
    assert view.difference_cause(view.FirstDifference(3, " a", " the", 0.9, "bfloat16")) == "wide"
    assert view.difference_cause(view.FirstDifference(3, " a", " the", None, "bfloat16")) == "unknown"
    assert view.near_tie_margin("bfloat16") == 0.5 and view.near_tie_margin("float16") == 0.0625
    assert view.near_tie_margin("int8") is None
