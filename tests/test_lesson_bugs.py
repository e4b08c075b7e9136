"""Lesson 7 (specviz.lessons.bugs): at the lesson's default seeds the exact-distribution test passes the correct
verifier and match acceptance and catches every deliberately wrong verifier and drafter, each arm judged on its own
against the same seeds, p and q, so that each is the others' control. The verdicts are tested on a small
distribution chosen by hand (the slips' size depends on p and q, not on a model); the engine's part, on a tiny
random target with a perturbed copy of it as the drafter: real forward passes, and the replay gives each arm the
engine's own tokens."""
from __future__ import annotations

import pytest
import torch

from specviz.lessons import bugs
from specviz.lessons.common import finish
from specviz.proposers import ModelDrafter
from specviz.models.testing import perturbed_copy, tiny_causal_lm

TEMPERATURE = 0.5  # p below is after it; taking p before it flattens p
P = torch.tensor([[0.40, 0.25, 0.15, 0.10, 0.06, 0.04], [1 / 6] * 6])  # the first token's p, then the bonus row's
Q = torch.tensor([[0.50, 0.02, 0.02, 0.06, 0.10, 0.30]])  # shares the target's favourite; over-weights the last
EXACT = [s.key for s in bugs.SLIPS if not s.wrong]
WRONG = [s.key for s in bugs.SLIPS if s.wrong]


@pytest.fixture(scope="module")
def record():
    return finish(bugs.on_distributions(P, Q, TEMPERATURE, runs=bugs.RUNS))


@pytest.mark.parametrize("key", EXACT)
def test_an_exact_verifier_passes_at_the_default_seeds(record, key):
    assert record.passed(key) is True, record.arm(key).looks


@pytest.mark.parametrize("key", WRONG)
def test_a_wrong_verifier_or_drafter_is_caught_at_the_default_seeds(record, key):
    assert record.passed(key) is False, record.arm(key).looks
    assert record.arm(key).caught_at() <= record.runs


def test_match_acceptance_is_exact_but_accepts_less(record):
    assert record.arm("match").accepted < record.arm("correct").accepted


def test_the_verdict_reads_as_a_table_and_a_sentence(record):
    assert [row[0] for row in bugs.bug_rows(record)] == [s.label for s in bugs.SLIPS]
    assert f"{len(WRONG)} of {len(WRONG)} bugs caught" in bugs.bug_sentence(record)


def test_the_replay_gives_every_arm_the_engines_tokens():
    target = tiny_causal_lm(vocab_size=12, seed=20)
    drafter = perturbed_copy(target, noise=1.0, seed=21)
    record = finish(bugs.bugs(target, [1, 2, 3, 4, 5], runs=20, most=20, temperature=0.6, chat=False,
                              rounding_tokens=0, make=lambda: ModelDrafter(drafter.model, 12), engine_seeds=5))
    assert (record.engine_seeds, record.engine_agreed, record.seeds) == (5, 5, 20)
    assert all(arm.runs == 20 for arm in record.arms)


@pytest.mark.quick
def test_without_renormalising_the_residual_runs_off_its_end():
    p = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])
    q = torch.tensor([[0.1, 0.8, 0.1]])
    draft = torch.tensor([1])  # p/q = 0.375: mostly rejected; the residual max(0, p - q) totals 0.5
    tokens = []
    for seed in range(200):
        verdict = bugs.wrong_verifiers.verify_residual_unnormalised(draft, q, p, torch.Generator().manual_seed(seed))
        if verdict.n_accepted == 0:
            tokens.append(verdict.next_token)
    assert tokens.count(2) / len(tokens) > 0.5  # norm(max(0, p - q)) gives token 2 a fifth; running off adds half


@pytest.mark.quick
def test_bfloat16_spacing_near_a_logit():
    assert bugs.bfloat16_spacing(20.0) == 0.125  # 8 significant bits: 16 <= x < 32 in steps of 2**-3
    assert bugs.bfloat16_spacing(1.5) == 2 ** -7


def test_a_saved_run_reads_back_as_the_record_it_was(record, tmp_path):
    from specviz.lessons.catalogue import LESSONS
    from specviz.lessons.saved import load_lesson, save_lesson
    from specviz.ui.learn_figures import bugs_figure

    lesson = next(lesson for lesson in LESSONS if lesson.key == "bugs")
    record.rounding = bugs.Rounding("a prompt", "eagle", ["a", " b"], ["a", " c"], True, 1, None,
                                    [" b", " c"], [20.0, 19.95], [" c", " b"], [20.0, 20.0])
    saved = load_lesson(save_lesson(tmp_path, lesson, record, {"device": "cpu"}, 1.0).read_text())
    assert saved.lesson.number == 7
    assert bugs.bug_rows(saved.record) == bugs.bug_rows(record)
    assert bugs.bug_sentence(saved.record) == bugs.bug_sentence(record)
    assert bugs_figure(saved.record) == bugs_figure(record)
    assert "**0.050** apart" in bugs.bug_sentence(saved.record)  # the margin where bfloat16 parts
    record.rounding = None


@pytest.mark.parametrize("field,value", [("method", "ngram"), ("runs", 5), ("runs", 5000), ("runs", "150"),
                                         ("temperature", 0.0), ("temperature", float("nan")), ("prompt", ""),
                                         ("prompt", "x" * 3000)])
def test_the_endpoint_refuses_a_bad_request_before_loading_a_model(field, value, monkeypatch):
    from specviz.service import calls
    from specviz.ui import learn_endpoints

    monkeypatch.setattr(calls, "load_target", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(learn_endpoints.gr.Error):
        learn_endpoints.bugs_api(**{"prompt": "Tell me a joke."} | {field: value})


def parted_rounding(**exact) -> bugs.Rounding:
    """A hand-built rounding record: bfloat16 plain parts from float32 at token 1 (a near-tie), the method from
    bfloat16 plain at token 6; exact: the exact mode's fields (a GPU's record)."""
    return bugs.Rounding("a prompt", "eagle", ["a", " b"], ["a", " c"], True, 1, 6, [" b", " c"], [20.0, 19.95],
                         [" c", " b"], [20.0, 20.0], **exact)


@pytest.mark.quick
def test_on_a_cpu_the_rounding_part_says_the_exact_mode_is_for_gpus():
    text = bugs.rounding_sentence(parted_rounding())
    assert "parts from bfloat16 plain at token 6" in text and "is for GPUs" in text
    assert "bit for bit" not in text  # the mode did not run: nothing claimed of it


@pytest.mark.quick
def test_on_a_gpu_the_rounding_part_shows_the_mode_off_and_on():
    text = bugs.rounding_sentence(parted_rounding(exact_ran=True, exact_covered=True, exact_parted_at=None))
    assert "with the exact mode off, the method parts from bfloat16 plain at token 6" in text
    assert "with it on, the method equals bfloat16 plain bit for bit" in text and "for GPUs" not in text
    # the controls: the mode on that still parts is a bug, never "bit for bit"; runs it did not cover claim nothing
    broken = bugs.rounding_sentence(parted_rounding(exact_ran=True, exact_covered=True, exact_parted_at=4))
    assert "still parts from plain at token 4: a bug in the exact mode" in broken and "bit for bit" not in broken
    uncovered = bugs.rounding_sentence(parted_rounding(exact_ran=True, exact_covered=False, exact_parted_at=None))
    assert "could not cover" in uncovered and "bit for bit" not in uncovered


@pytest.mark.quick
def test_a_rounding_record_saved_before_the_exact_mode_still_reads():
    from pathlib import Path

    from specviz.lessons.saved import load_lesson

    saved = load_lesson(
        (Path(__file__).parent.parent / "results/2026-11-29-cpu-lesson-7/lesson-7-bugs.json").read_text()
    )
    assert saved.record.rounding.exact_ran is False
    assert "is for GPUs" in bugs.bug_sentence(saved.record)


def test_the_rounding_contrast_runs_the_exact_mode_only_where_it_exists(tiny_target):
    record = bugs.rounding(tiny_target, [1, 2, 3, 4], "ngram", 8, chat=False)
    assert len(record.float32) == len(record.bfloat16) == 8
    assert record.speculative_identical  # float32: the method gives plain's tokens
    assert not record.exact_ran and record.exact_parted_at is None  # a CPU: no exact mode to run


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (and the default model's file there)")
def test_on_a_gpu_the_exact_mode_makes_the_bfloat16_method_equal_plain():
    from specviz import load_model

    target = load_model("default", device="cuda", dtype="bfloat16")
    record = bugs.rounding(target, bugs.PROMPT, "eagle", 32)
    assert record.exact_ran and record.exact_covered
    assert record.exact_parted_at is None, bugs.rounding_sentence(record)
