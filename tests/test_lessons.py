"""The Learn tab's measurements (specviz.lessons): each on the tiny random models, with a control that must fail
where a lesson claims something; the distribution lesson and the cost floor also on the offline default model."""
import re
from collections import Counter

import pytest
import torch

from specviz import lessons
from specviz.proposers import Draft, ModelDrafter, Proposer
from specviz.rule.theory import expected_speedup

PROMPT = [1, 5, 9, 2, 7, 3]


@pytest.mark.quick
def test_two_sample_test_passes_one_distribution_and_catches_another():
    generator = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    draw = lambda n: Counter(torch.multinomial(probs, n, replacement=True, generator=generator).tolist())  # noqa: E731
    same = lessons.two_sample_test(draw(2000), draw(2000))
    assert same.p_value > 0.01
    shifted = Counter(torch.multinomial(torch.tensor([0.3, 0.3, 0.2, 0.2]), 2000, replacement=True,
                                        generator=generator).tolist())
    assert lessons.two_sample_test(draw(2000), shifted).p_value < 1e-6
    assert lessons.two_sample_test(Counter(), shifted).p_value == 1.0  # nothing to compare yet


@pytest.mark.quick
def test_verify_cost_floor_and_ratio_are_read_off_the_record():
    model = torch.nn.Linear(1000, 1000)  # 1,001,000 float32 numbers
    assert lessons.weight_bytes(model) == 1_001_000 * 4
    record = lessons.VerifyCost("cpu",
                                [lessons.CostPoint("positions", 1, 10.0, 0),
                                 lessons.CostPoint("positions", 4, 15.0, 0)],
                                4_000_000_000, 20.0, "assumed")
    assert record.floor_ms == pytest.approx(200.0)
    assert record.ratio(4) == pytest.approx(1.5)
    assert record.ratio(8) is None


@pytest.mark.quick
def test_expected_curve_is_the_theorem_and_literature_names_its_sources():
    curve = lessons.expected_curve(0.8, 0.1, [0, 4])
    assert curve[0] == (0, 1.0)
    assert curve[1][1] == pytest.approx((1 - 0.8 ** 5) / ((1 - 0.8) * (4 * 0.1 + 1)))
    for row in lessons.LITERATURE:
        assert row.source and row.targets and row.speedup
    assert lessons.literature_for("eagle").source.startswith("Li et al.")
    assert lessons.literature_for("plain") is None


@pytest.mark.quick
def test_every_literature_row_cites_its_paper_and_a_distilled_draft_is_among_them():
    for row in lessons.LITERATURE:
        assert re.search(r"arXiv \d{4}\.\d{5}: ", row.source), row.source  # the id, then the part that says it
    assert "distilled draft model" in {row.drafter for row in lessons.LITERATURE}
    assert lessons.literature_for("retrieval").source.startswith("He et al.")
    assert lessons.literature_for("ngram").source.startswith("Fu et al.")
    assert len(lessons.literature_lines()) == len(lessons.LITERATURE)  # the kinds no method ships included
    assert lessons.literature_for("no-such-method") is None


@pytest.mark.quick
def test_lesson_6_lists_what_loads_offline_a_new_drafter_folder_included(tmp_path):
    from types import SimpleNamespace

    from specviz.models.loading import DEFAULT_MODEL
    from specviz.proposers.checkpoints import SHIPPED, shipped_methods

    default, other = SimpleNamespace(name=DEFAULT_MODEL), SimpleNamespace(name="someone/else")
    assert lessons.offline_methods(default) == ["draft", "ngram", "retrieval", "early-exit", "medusa", "eagle",
                                              "dflash"]
    assert lessons.offline_methods(other) == ["ngram", "early-exit"]  # control: nothing ships for it
    for folder in ("medusa", "notes"):  # a drafter folder, and one without a config (not a drafter)
        (tmp_path / SHIPPED[DEFAULT_MODEL] / folder).mkdir(parents=True)
    (tmp_path / SHIPPED[DEFAULT_MODEL] / "medusa" / "config.json").write_text("{}")
    shipped = shipped_methods(default, root=tmp_path)
    assert shipped == ["medusa"]
    assert lessons.offline_methods(default, shipped) == ["ngram", "early-exit", "medusa"]
    # the draft model's folder
    assert lessons.offline_methods(default, ["distilled"]) == ["draft", "ngram", "early-exit"]


class ArgmaxDrafter(Proposer):
    """Drafts the target's own favourite token with no distribution (one-hot q, as n-gram lookup and Medusa's
    argmax heads do): the correct verifier keeps the output exact; the wrong one gives the favourite a second
    chance at every rejection, a bias of p(1 - p) on it."""

    name = "argmax"

    def __init__(self, model):
        self.model = model

    @torch.inference_mode()
    def propose(self, tokens, gamma):
        favourite = self.model(input_ids=tokens[None]).logits[0, -1].argmax()
        return Draft(favourite.repeat(gamma), None)


def test_distribution_passes_the_real_verifier_and_catches_the_wrong_one(tiny_target):
    make = lambda: ArgmaxDrafter(tiny_target.model)  # noqa: E731
    records = list(lessons.distribution(tiny_target, PROMPT, runs=300, make=make, batch=100))
    assert len(records) == 9  # three histograms, a record every 100 runs
    result = records[-1]
    assert result.plain.runs == result.speculative.runs == result.wrong.runs == 300
    assert result.speculative.drafted == 300 and 0 < result.speculative.accepted < 300  # rejections happened
    assert result.passed, (result.p_value, result.exact_p_value)
    assert result.caught, (result.wrong_p_value, result.wrong_exact_p_value)
    data = result.to_dict()
    assert sum(data["speculative"]["counts"].values()) == 300 and data["caught"] is True


def test_lesson_2_decodes_plain_runs_in_batches_each_as_its_single_run(tiny_target, monkeypatch):
    """Plain decoding's histogram comes from batches of seeds (a third of the lesson's time otherwise), and each
    row's token is the one its batch-1 run of the same seed draws."""
    import dataclasses

    from specviz import DecodeSettings
    from specviz.engine.run import SpeculativeRun
    from specviz.lessons import exactness
    from specviz.proposers import PlainProposer

    widths = []
    real = exactness.decode_batch
    monkeypatch.setattr(exactness, "decode_batch", lambda *args, **kwargs: widths.append(len(args[2]))
                        or real(*args, **kwargs))
    make = lambda: ArgmaxDrafter(tiny_target.model)  # noqa: E731
    record = lessons.finish(lessons.distribution(tiny_target, PROMPT, runs=30, make=make, wrong=False, first_seed=5))
    assert widths == [25, 5]
    settings = DecodeSettings(max_new_tokens=2, gamma=1, temperature=1.0, stop_at_eos=False)
    single = Counter()
    for i in range(30):
        run = SpeculativeRun(tiny_target, PlainProposer(), PROMPT, dataclasses.replace(settings, seed=5 + 60 + i),
                             detail=False)
        for _ in run:
            pass
        single[run.result.token_ids[1]] += 1
    assert record.plain.counts == single
    assert record.speculative.counts != single  # the control: other seeds, another sample
    sentence = lessons.distribution_sentence(lessons.finish(lessons.distribution(tiny_target, PROMPT, runs=10,
                                                                                 make=make)))
    assert "computed rather than sampled" in sentence  # why the exact fit sees more than the two-sample test


def test_greedy_side_by_side_is_identical(tiny_target, tiny_drafter):
    proposer = ModelDrafter(tiny_drafter.model, tiny_target.vocab_size)
    result = lessons.greedy_side_by_side(tiny_target, PROMPT, max_new_tokens=24, proposer=proposer)
    assert result.identical and result.first_difference is None
    assert len(result.speculative) == len(result.plain) == 24


def test_mechanic_counts_what_each_forward_bought(tiny_target, tiny_drafter):
    noisy = lessons.finish(lessons.mechanic(tiny_target, PROMPT, gamma=4, max_new_tokens=20,
                                            proposer=ModelDrafter(tiny_drafter.model, tiny_target.vocab_size)))
    assert noisy.new_tokens == len(noisy.result.token_ids) == 20
    assert noisy.forwards == len(noisy.result.steps)
    assert all(s.bought == s.accepted + 1 for s in noisy.steps[:-1])  # the last step may be cut at 20
    # control: the target as its own drafter agrees every time, so each forward buys gamma + 1 tokens
    perfect = lessons.finish(lessons.mechanic(tiny_target, PROMPT, gamma=4, max_new_tokens=20,
                                              proposer=ModelDrafter(tiny_target.model, tiny_target.vocab_size)))
    assert perfect.tokens_per_forward == 5.0
    assert noisy.tokens_per_forward < perfect.tokens_per_forward


def test_acceptance_table_reads_alpha_tau_c_and_the_expected_speedup(tiny_target, tiny_drafter):
    def make(method):
        model = tiny_target if method == "self" else tiny_drafter
        return ModelDrafter(model.model, tiny_target.vocab_size)

    rows = lessons.finish(lessons.acceptance(tiny_target, ["self", "noisy"], {"a": PROMPT, "b": PROMPT[::-1]},
                                             gamma=3, max_new_tokens=16, make=make))
    assert [(r.kind) for r in rows] == ["a", "a", "b", "b"]
    self_rows = rows[0::2]
    assert all(r.alpha == 1.0 and r.tau == 4.0 for r in self_rows)
    for r in rows:
        assert r.measured_speedup > 0
        assert r.expected_speedup == pytest.approx(expected_speedup(r.alpha, 3, r.c))
    assert rows[1].alpha < 1.0


def test_drafter_costs_count_only_what_the_target_does_not_hold(tiny_target, tiny_drafter):
    def make(method):
        return {"ngram": lambda: lessons.make_proposer("ngram", tiny_target),
                "early-exit": lambda: lessons.make_proposer("early-exit", tiny_target),
                "draft": lambda: ModelDrafter(tiny_drafter.model, tiny_target.vocab_size)}[method]()

    rows = {r.method: r for r in lessons.finish(lessons.drafter_costs(
        tiny_target, ["ngram", "early-exit", "draft"], prompt=PROMPT, max_new_tokens=12, make=make))}
    own = sum(p.numel() for p in tiny_drafter.model.parameters())
    assert rows["ngram"].parameters == 0 and rows["ngram"].bytes == 0
    assert rows["early-exit"].parameters == 0  # its layers are the target's
    assert rows["draft"].parameters == own  # a separate model: every weight is extra
    assert rows["draft"].bytes >= own * 4
    assert rows["draft"].target_parameters == sum(p.numel() for p in tiny_target.model.parameters())


def test_lesson_1_on_the_default_model_writes_sense(default_target):
    """The mechanic is read as text by a class: its prompt is one the small model answers sensibly (greedy, so
    this is its one answer on a CPU in float32)."""
    s = lessons.SETTINGS["mechanic"]
    record = lessons.finish(lessons.mechanic(default_target, s["prompt"], s["method"], s["gamma"], s["max_new"]))
    assert record.result.text.startswith("1. **Avoiding Caffeine and Alcohol Before Bed**: Caffeine and alcohol")
    assert record.tokens_per_forward > 1.3  # and the drafter still has something to show


def test_default_model_verify_cost_has_a_stated_floor(default_target):
    record = lessons.finish(lessons.verify_cost(default_target, positions=(1, 4), repeats=1))
    assert [p.x for p in record.points] == [1, 4]
    assert record.weight_bytes > 100e6  # 135M parameters
    assert "assumed" in record.bandwidth_source and record.floor_ms > 0
    assert record.ratio(4) > 0


@pytest.mark.quick
def test_the_batch_lesson_decodes_a_full_batch_and_at_least_a_few_prompts_at_each_size():
    from specviz.measure.batch_bench import batches_of
    from specviz.lessons.batch_size import LEAST_PROMPTS, prompts_for

    chosen = list(range(8))
    assert prompts_for(chosen, 1) == chosen[:LEAST_PROMPTS] == [0, 1, 2, 3]  # the three kinds and one again
    assert batches_of(prompts_for(chosen, 2), 2) == [[0, 1], [2, 3]]
    assert prompts_for(chosen, 8) == chosen  # control: a size above the least decodes its whole batch
    assert prompts_for([5, 6], 1) == [5, 6]  # fewer prompts than the least: each of them


@pytest.mark.quick
def test_lesson_4_marks_a_speedup_that_fails_its_check_and_quotes_only_the_trusted_ones():
    from specviz.measure.plausibility import BUSY

    rows = [lessons.AcceptanceRow("code", "ngram", 4, 0.9, 3.5, 0.0, 5.3, 3.3, 32, doubt="5.30× is more than τ = 3.50"),
            lessons.AcceptanceRow("code", "eagle", 4, 0.6, 2.2, 0.1, 1.6, 1.7, 32),
            lessons.AcceptanceRow("code", "early-exit", 4, 0.0, 1.0, 0.2, 0.5, 0.6, 32)]
    table = lessons.acceptance_rows(rows)
    assert table[0][6] == "5.30× (noisy)" and table[1][6] == "1.60×"
    sentence = lessons.acceptance_sentence(rows)
    assert "**1.60×**" in sentence and "**5.30×**" not in sentence and BUSY in sentence
    assert BUSY not in lessons.acceptance_sentence(rows[1:])  # the control: every row trusted, no note


@pytest.mark.quick
def test_lesson_4_checks_each_pair_from_its_runs_own_steps():
    from types import SimpleNamespace

    from specviz.lessons.speedup import pair_doubt

    def run(step_seconds, gammas, tokens):
        elapsed, total = [], 0.0
        for seconds in step_seconds:
            total += seconds
            elapsed.append(total)
        steps = [SimpleNamespace(elapsed_s=e, gamma=g) for e, g in zip(elapsed, gammas)]
        metrics = SimpleNamespace(wall_seconds=total, mean_accepted_length=tokens / len(steps), draft_seconds=0.0,
                                  verify_seconds=total)
        return SimpleNamespace(steps=steps, metrics=metrics)

    spec = run([0.07] + [0.035] * 8, [4] * 9, 32)  # tau 3.56
    assert pair_doubt(run([0.06] + [0.025] * 31, [0] * 32, 32), spec) is None
    assert "more than τ" in pair_doubt(run([0.06] + [0.05] * 31, [0] * 32, 32), spec)  # plain at half speed


@pytest.mark.quick
def test_lesson_5_marks_a_batch_size_whose_figures_do_not_add_up():
    from specviz.measure.plausibility import BUSY

    summary = [{"method": "retrieval", "batch_size": 1, "speedup": 1.4, "mean_accepted_length": 2.0, "path": "single"},
               {"method": "retrieval", "batch_size": 2, "speedup": 3.1, "mean_accepted_length": 2.0, "path": "batched"},
               {"method": "retrieval", "batch_size": 4, "speedup": 0.9, "mean_accepted_length": 2.0, "path": "batched"}]
    costs = [{"batch_size": 1, "ratio": 1.2}, {"batch_size": 2, "ratio": 1.3}, {"batch_size": 4, "ratio": 0.5}]
    doubts = lessons.batch_size.batch_doubts(summary, "retrieval", costs)
    assert sorted(doubts) == [2, 4] and "more than τ" in doubts[2] and "verify pass measured 0.50×" in doubts[4]
    assert BUSY in lessons.batch_sentence(summary, "retrieval", costs)
    assert BUSY not in lessons.batch_sentence(summary[:1], "retrieval", costs[:1])  # the control


@pytest.mark.quick
def test_spec_bench_rows_sit_beside_specviz_s_current_figures():
    """Each row's specviz figures are the current ones (specviz.measure.figures), never the host loop's old run
    told as specviz's: only the lookup ngram:8, which has no current run, quotes the host loop, and says so."""
    from specviz.measure.figures import headline

    assert {r.method for r in lessons.SPEC_BENCH} == {"EAGLE-2", "Hydra", "Medusa", "PLD", "REST", "SpS", "Lookahead"}
    for row in lessons.SPEC_BENCH:
        assert 1 < row.a100[0] < 3 and 1 < row.a100[1] < 5, row  # a speedup and a tau, not swapped
    assert lessons.SPEC_BENCH[2].specviz_h200 == (headline("medusa:4").speedup, None) == (1.29, None)
    lines = dict(zip([r.method for r in lessons.SPEC_BENCH], lessons.spec_bench_lines()))
    assert "specviz medusa:4 1.29x (135M target, H200, device loop, 2b987f2)" in lines["Medusa"]
    assert "0.61x" not in " ".join(lines.values())  # the control: the host loop's Medusa figure is gone
    assert "host loop" in lines["PLD"] and "host loop" not in lines["EAGLE-2"]
    assert len(lessons.spec_bench_lines()) == len(lessons.SPEC_BENCH)
    for row in lessons.LITERATURE:  # each says where it was checked, or that it could not be
        assert row.checked, row.drafter
