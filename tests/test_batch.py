"""Batched decoding (batch.py, runners/batched.py, batch_bench.py): every row of a ragged batch gives its
batch-1 output, greedy and sampled (the same seed draws the same tokens), rows that finish leave the batch,
drafters that cannot batch are refused, and the bench reports each batch size against plain decoding."""
import dataclasses
import json

import pytest
import torch

from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once
from specviz.engine.batch import BatchRun, decode_batch
from specviz.measure.batch_bench import batches_of, crossover, parse_batch_sizes, queue_of, row_of, summarize_batches
from specviz.errors import InvalidSettingError
from specviz.runners.batched import BatchedRunner

from test_errors import assert_one_line_error, run_cli

PROMPTS = ["Write a Python function that checks whether a number is prime.", "List the planets.",
           "Tell me a joke about caches, then explain it."]  # different lengths: a ragged batch


def batch_one(target, method, ids, settings, row=0, draft=None):
    seeded = settings if settings.seed is None else dataclasses.replace(settings, seed=settings.seed + row)
    return run_once(target, make_proposer(method, target, draft), ids, seeded, detail=False).token_ids


@pytest.mark.parametrize("method", ["plain", "ngram", "retrieval"])
def test_each_row_gives_its_batch_one_output_greedy(default_target, method):
    ids = [encode(default_target, p) for p in PROMPTS]
    settings = DecodeSettings(max_new_tokens=32, gamma=4)
    run = decode_batch(default_target, lambda: make_proposer(method, default_target), ids, settings)
    assert run.token_ids == [batch_one(default_target, method, i, settings) for i in ids]
    assert len({tuple(out) for out in run.token_ids}) == len(PROMPTS)  # the rows did not mix
    if method != "plain":
        assert run.drafted > 0 and run.mean_accepted_length > 1.0


@pytest.mark.parametrize("method", ["plain", "ngram"])
def test_each_row_samples_as_its_batch_one_run_of_the_same_seed(default_target, method):
    ids = [encode(default_target, p) for p in PROMPTS]
    settings = DecodeSettings(max_new_tokens=24, gamma=4, temperature=0.9, top_p=0.95, seed=11)
    run = decode_batch(default_target, lambda: make_proposer(method, default_target), ids, settings)
    assert run.token_ids == [batch_one(default_target, method, i, settings, row) for row, i in enumerate(ids)]
    other = decode_batch(default_target, lambda: make_proposer(method, default_target), ids,
                         dataclasses.replace(settings, seed=12))
    assert other.token_ids != run.token_ids  # control: the seed matters, so equality above says something


def test_finished_rows_leave_the_batch(tiny_target):
    ids = [[3, 7, 1, 3, 7], [5, 2], [9, 9, 9, 4, 1, 2, 8]]
    settings = DecodeSettings(max_new_tokens=12, gamma=3, stop_at_eos=False)
    short = decode_batch(tiny_target, lambda: make_proposer("ngram", tiny_target), ids, settings)
    assert [len(out) for out in short.token_ids] == [12, 12, 12]
    assert short.token_ids == [batch_one(tiny_target, "ngram", i, settings) for i in ids]
    assert short.forwards == max(short.row_forwards) and sum(short.row_forwards) >= short.forwards


def test_the_batched_runner_keeps_rows_apart_and_drops_finished_ones(tiny_target):
    runner = BatchedRunner(tiny_target.model, batch=2, capacity=32)
    runner.forward(torch.tensor([[1, 2, 3]]), "none", rows=slice(0, 1))
    runner.forward(torch.tensor([[4]]), "none", rows=slice(1, 2))
    assert runner.lengths.tolist() == [3, 1]
    logits = runner.forward(torch.tensor([[5, 6], [7, 8]]))
    assert logits.shape[:2] == (2, 2) and runner.lengths.tolist() == [5, 3]
    runner.rollback(torch.tensor([4, 2]))
    runner.keep([1])
    assert runner.batch == 1 and runner.lengths.tolist() == [2]
    assert runner.host_lengths == [2]  # the host's copy, which sizes a forward without reading the device


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_batch_one_runs_the_single_sequence_loop_with_the_batched_runner_s_records(tiny_target, tiny_drafter,
                                                                                  method):
    from specviz.api import batch_drafting

    ids = [[3, 7, 1, 3, 7, 1, 3], [5, 2, 5, 2]]
    settings = DecodeSettings(max_new_tokens=12, gamma=3, stop_at_eos=False)
    drafting = batch_drafting(method, tiny_target, tiny_drafter)
    single = decode_batch(tiny_target, drafting, ids, settings, batch_size=1)
    batched = decode_batch(tiny_target, drafting, ids, settings, batch_size=1, path="batched")
    assert (single.path, batched.path) == ("single", "batched")  # control: the two paths did run
    assert single.token_ids == batched.token_ids == [batch_one(tiny_target, method, i, settings, 0, tiny_drafter)
                                                     for i in ids]
    assert (single.row_forwards, single.drafted, single.accepted) == (
        batched.row_forwards, batched.drafted, batched.accepted)
    assert single.forwards == sum(single.row_forwards) and single.drafted > 0
    assert decode_batch(tiny_target, drafting, ids, settings).path == "batched"  # two rows: the batched runner
    with pytest.raises(InvalidSettingError, match="path"):
        decode_batch(tiny_target, drafting, ids, settings, path="fast")


def test_a_batched_forward_costs_more_with_more_positions(tiny_target):
    from specviz.engine.batch import forward_cost

    one, many = forward_cost(tiny_target, 2, 1, context=16), forward_cost(tiny_target, 2, 64, context=16)
    assert 0 < one and 0 < many  # timings, not asserted against each other (no timing assertions in tests)


def test_drafters_that_cannot_batch_are_refused(default_target):
    with pytest.raises(InvalidSettingError, match="does not batch"):
        from specviz.api import check_batchable
        check_batchable("eagle")
    with pytest.raises(InvalidSettingError, match="chains"):
        decode_batch(default_target, lambda: make_proposer("ngram", default_target), [[1, 2]],
                     DecodeSettings(tree=8))


@pytest.mark.quick
def test_batch_sizes_parse_and_batches_cover_every_prompt():
    assert parse_batch_sizes("4,1, 2,4") == [1, 2, 4]
    with pytest.raises(InvalidSettingError, match="whole numbers"):
        parse_batch_sizes("1,zero")
    assert batches_of([1, 2, 3], 2) == [[1, 2], [3, 1]]
    assert batches_of([1, 2], 4) == [[1, 2, 1, 2]]
    assert queue_of([1, 2, 3], 2) == [1, 2, 3] and queue_of([1, 2], 3) == [1, 2, 1]


@pytest.mark.quick
def test_the_summary_marks_where_speculation_stops_paying():
    def row(method, size, seconds):
        return {"method": method, "batch_size": size, "rows": size, "new_tokens": 100, "wall_seconds": seconds,
                "ms_per_token": 1.0, "row_forwards": 50, "drafted": 10, "accepted": 5, "identical_rows": size}

    rows = [row("plain", 1, 2.0), row("ngram", 1, 1.0), row("plain", 8, 1.0), row("ngram", 8, 1.25)]
    summary = summarize_batches(rows)
    speedups = {(s["method"], s["batch_size"]): s["speedup"] for s in summary}
    assert speedups[("ngram", 1)] == pytest.approx(2.0) and speedups[("ngram", 8)] == pytest.approx(0.8)
    assert crossover(summary, "ngram") == 8
    assert crossover(summarize_batches(rows[:2]), "ngram") is None


@pytest.mark.quick
def test_a_measured_batch_becomes_one_row_that_counts_rows_identical_to_plain():
    def run(outputs):
        return BatchRun(token_ids=outputs, forwards=3, row_forwards=[3, 2], drafted=4, accepted=2, wall_seconds=2.0,
                        prefill_seconds=0.5)

    plain = run([[1, 2, 3], [4, 5]])
    row = row_of(run([[1, 2, 3], [4, 6]]), plain, "ngram", 2)
    assert row["identical_rows"] == 1 and row["rows"] == 2 and row["new_tokens"] == 5
    assert row_of(plain, plain, "plain", 2)["identical_rows"] == 2  # control: plain against itself
    assert summarize_batches([row_of(plain, plain, "plain", 2), row])[1]["identical_share"] == 0.5


@pytest.mark.quick
def test_a_sequence_s_latency_a_token_counts_the_prompts_its_row_decoded_one_after_another():
    def run(width):
        return BatchRun(token_ids=[[1] * 4] * 4, forwards=8, row_forwards=[4] * 4, drafted=0, accepted=0,
                        wall_seconds=2.5, prefill_seconds=0.5, width=width)

    assert run(None).ms_per_token == pytest.approx(500.0)  # four rows at once: 4 tokens a row in 2 s
    assert run(2).ms_per_token == pytest.approx(250.0)  # two rows, each two prompts: 8 tokens a row in 2 s


def test_bench_at_several_batch_sizes(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": i, "category": "qa", "turns": [text]}) + "\n"
                               for i, text in enumerate(["Count from 1 to 9.", "Name three colours."])))
    out = tmp_path / "batches.json"
    proc = run_cli("bench", "--prompts", str(prompts), "--methods", "ngram,draft", "--draft", "default",
                   "--batch-sizes", "1,2", "--max-new-tokens", "12", "--compare-single", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert {(s["method"], s["batch_size"], s["path"]) for s in report["summary"]} == {
        (m, 1, path) for m in ("plain", "ngram", "draft") for path in ("single", "batched")} | {
        (m, 2, "batched") for m in ("plain", "ngram", "draft")}
    assert all(s["identical_share"] == 1.0 for s in report["summary"])
    # one refill queue a method, size and path, over both prompts (not a batch of one for each prompt)
    assert len(report["results"]) == 9 and all(r["rows"] == 2 for r in report["results"])
    assert "stops paying" in proc.stdout or "every batch size" in proc.stdout
    refused = run_cli("bench", "--prompts", str(prompts), "--methods", "eagle", "--batch-sizes", "2",
                      "--out", str(tmp_path / "no.json"))
    assert_one_line_error(refused, "does not batch")


def test_the_graphs_padded_shapes_give_the_eager_logits(tiny_target):
    """On a GPU a whole-batch forward runs in a graph's fixed shape: the batch padded with idle rows to a power of
    two, the span to a power of two. Run here eagerly in those shapes (padded_shapes=True), every forward,
    rollback and departure must give what the unpadded runner gives."""
    eager = BatchedRunner(tiny_target.model, batch=5, capacity=300)
    padded = BatchedRunner(tiny_target.model, batch=5, capacity=300, padded_shapes=True)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 32, (n,), generator=generator) for n in (5, 17, 9, 2, 30)]
    for runner in (eager, padded):
        for row, prompt in enumerate(prompts):
            runner.forward(prompt[None], "none", rows=slice(row, row + 1))
    for step in range(6):
        ids = torch.randint(1, 32, (eager.batch, 3), generator=generator)
        logits = eager.forward(ids)
        assert torch.allclose(padded.forward(ids), logits, atol=1e-5)
        lengths = [length - step % 3 for length in eager.host_lengths]  # rows keep 0 to 2 of the 3 tokens
        eager.rollback(lengths)
        padded.rollback(lengths)
        if step == 2:  # rows leave: the padded runner moves the others down in place, beside an idle row
            eager.keep([0, 2, 4])
            padded.keep([0, 2, 4])
    assert padded.lengths.tolist() == eager.lengths.tolist() == eager.host_lengths
    assert padded.all_lengths[3:].tolist() == [0, 0]  # the idle rows stay empty
    assert {key[0] for key in padded.shapes} == {5, 4}  # 5 rows, then 3 padded to 4
    # control: what the padding relies on, the mask, hides everything past a row's length but nothing before it
    ids = torch.randint(1, 32, (3, 3), generator=generator)
    reference = padded.forward(ids)
    padded.rollback([length - 3 for length in padded.host_lengths])
    end = padded.host_lengths[0]
    padded.keys[:, 0, :, end + 3:] = 7.0  # garbage past row 0's new tokens, inside the padded span
    assert torch.allclose(padded.forward(ids), reference, atol=1e-5)
    padded.rollback([length - 3 for length in padded.host_lengths])
    padded.keys[:, 0, :, end - 1] = 7.0  # garbage in a slot row 0 attends to
    assert not torch.allclose(padded.forward(ids), reference, atol=1e-3)


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_rows_give_their_batch_one_output_in_the_graphs_padded_shapes(tiny_target, tiny_drafter, method,
                                                                      monkeypatch):
    """decode_batch as it runs on a GPU (steps padded to gamma + 1 positions, rows padded to a power of two),
    eagerly here: each row still gives its batch-1 output."""
    import specviz.engine.batch
    import specviz.engine.batch_draft
    from specviz.api import batch_drafting

    padded = lambda model, batch, capacity, options=None: BatchedRunner(  # noqa: E731
        model, batch, capacity, padded_shapes=True, options=options)
    monkeypatch.setattr(specviz.engine.batch, "batched_runner", padded)
    monkeypatch.setattr(specviz.engine.batch_draft, "batched_runner", padded)
    ids = [[3, 7, 1, 3, 7, 1, 3], [5, 2], [9, 9, 9, 4, 1, 2, 8]]
    settings = DecodeSettings(max_new_tokens=14, gamma=3, stop_at_eos=False)
    draft = tiny_drafter if method == "draft" else None
    run = decode_batch(tiny_target, batch_drafting(method, tiny_target, draft), ids, settings)
    assert run.token_ids == [batch_one(tiny_target, method, i, settings, draft=draft) for i in ids]
