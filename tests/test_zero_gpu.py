"""ZeroGPU's workers, emulated (specviz/service/zero_emulation.py, as `spaces` 0.51 runs a GPU call) and what a worker
prepares (specviz/service/gpu_worker.py): a worker serves calls while it is kept, a new one starts from nothing, what a
parent prepared is not taken for the worker's, preparing stops at its bound and the run then goes on eagerly."""
from __future__ import annotations

import json
import os

import pytest

from specviz import DecodeSettings
from specviz.api import make_proposer, run_once, warm_up
from specviz.errors import InvalidSettingError
from specviz.service.gpu_worker import begin_call, needs_preparing, prepare, this_worker
from specviz.options import EngineOptions
from specviz.service.zero_emulation import GpuFunction, WorkerError

MODELS = {}  # what the workers find in the memory they were forked with (as an app's loaded modules)
KEY = ("plain", 5, 64)


def where_am_i(tag: str):
    """A GPU call: the worker's pid and its call number there."""
    yield (tag, os.getpid(), begin_call())


def counting(most: int):
    begin_call()
    for index in range(most):
        yield index


def failing():
    begin_call()
    yield "first"
    raise ValueError("a failure inside the call")


def prepare_tiny(bound):
    """A GPU call that prepares the tiny model's run on the worker, then reports it."""
    begin_call()
    target = MODELS["tiny"]
    yield prepare(target.model, KEY, lambda: warm_up(target, 5, 64), bound)


@pytest.fixture
def gpu_function():
    functions = []

    def make(task):
        functions.append(GpuFunction(task))
        return functions[-1]

    yield make
    for function in functions:
        function.retire()


def test_a_worker_serves_calls_until_it_is_retired(gpu_function):
    call = gpu_function(where_am_i)
    (_, first_pid, first_call), = list(call("a"))
    (_, second_pid, second_call), = list(call("b"))
    assert first_pid != os.getpid()  # computed in a worker, not here
    assert (second_pid, first_call, second_call) == (first_pid, 1, 2)  # the same worker, its second call
    call.retire()  # the GPU lent elsewhere meanwhile
    (_, third_pid, third_call), = list(call("c"))
    assert third_pid != first_pid and third_call == 1  # the control: a new worker counts from 1
    assert call.forked == 2


def test_a_stopped_call_keeps_its_worker_and_a_failed_one_does_not(gpu_function):
    call = gpu_function(counting)
    records = call(10_000)
    assert next(records) == 0
    records.close()  # the caller stops: the worker ends the call at its next record
    pid = call.last_pid
    assert list(call(3)) == [0, 1, 2] and call.last_pid == pid  # kept, as spaces keeps it after a stop
    broken = gpu_function(failing)
    records = broken()
    assert next(records) == "first"
    with pytest.raises(WorkerError, match="ValueError"):  # only the class name crosses, as on ZeroGPU
        next(records)
    failed_pid = broken.last_pid
    with pytest.raises(WorkerError):
        list(broken())
    assert broken.last_pid != failed_pid  # a worker whose call failed is not used again


def test_arguments_that_cannot_be_sent_fail_here(gpu_function):
    call = gpu_function(where_am_i)
    with pytest.raises(Exception, match="pickle|lambda|local"):
        list(call(lambda: None))
    assert call.forked == 0  # before any worker was forked


def test_a_worker_prepares_once_and_never_takes_its_parents_state_for_its_own(gpu_function, tiny_target):
    MODELS["tiny"] = tiny_target
    parent = prepare(tiny_target.model, KEY, lambda: warm_up(tiny_target, 5, 64))
    assert not needs_preparing(tiny_target.model, KEY)  # prepared here, in this process
    assert parent.pid == os.getpid() and parent.eager is None
    call = gpu_function(prepare_tiny)
    fresh, = list(call(None))
    again, = list(call(None))
    assert fresh.pid != os.getpid() and fresh.needed and fresh.fresh_worker  # what this process did is not the worker's
    assert (again.pid, again.call, again.needed) == (fresh.pid, 2, False)  # the worker's own, kept between calls
    call.retire()
    new, = list(call(None))
    assert new.pid != fresh.pid and new.needed and new.call == 1  # a new worker prepares again
    assert this_worker().pid == os.getpid() and not needs_preparing(tiny_target.model, KEY)  # this process unchanged


def test_preparing_stops_at_its_bound_and_the_run_goes_on_eagerly(tiny_target):
    key = ("bounded", id(tiny_target))
    stopped = prepare(tiny_target.model, key, lambda: warm_up(tiny_target, 5, 64), bound=0)
    assert stopped.eager and "within 0 s" in stopped.eager
    assert needs_preparing(tiny_target.model, key)  # not remembered: the next call goes on preparing
    options = stopped.options_for_run(EngineOptions())
    assert (options.graphs, options.compile) == (False, False)
    ids, settings = [1, 2, 3, 1, 2, 3, 1], DecodeSettings(max_new_tokens=12, gamma=3)
    eager = run_once(tiny_target, make_proposer("ngram", tiny_target, options=options), ids, settings, options=options)
    reference = run_once(tiny_target, make_proposer("ngram", tiny_target), ids, settings)
    assert eager.token_ids == reference.token_ids  # the run goes on, same output
    finished = prepare(tiny_target.model, key, lambda: warm_up(tiny_target, 5, 64), bound=60)
    assert finished.eager is None and not needs_preparing(tiny_target.model, key)  # the control: within the bound
    assert finished.options_for_run(EngineOptions()) == EngineOptions()


def test_a_capture_that_fails_lets_the_run_go_on_eagerly(tiny_target):
    def broken():
        raise RuntimeError("out of memory while capturing")

    failed = prepare(tiny_target.model, ("broken",), broken, bound=60)
    assert failed.eager and "RuntimeError" in failed.eager and "out of memory" in failed.eager

    def mistaken():
        raise InvalidSettingError("a tree needs a method that drafts trees")

    with pytest.raises(InvalidSettingError):  # the run's own mistake is no GPU failure: it is said as it is
        prepare(tiny_target.model, ("mistaken",), mistaken, bound=60)


def test_the_zero_gpu_bench_runs_its_calls_on_a_cpu(tmp_path, capsys):
    """scripts.zero_gpu_bench with a tiny random model: every call it makes, in the workers it says, and its
    report. Its speeds on a CPU mean nothing; what it measures on the GPU is in docs/deploy.md."""
    from scripts.zero_gpu_bench import main

    out = tmp_path / "zero.json"
    report = main(["--target", "random:llama-tiny", "--per-category", "1", "--limit", "2", "--max-new-tokens", "6",
                   "--big", "random:llama-tiny", "--big-prompts", "1", "--big-tokens", "4", "--reuse-calls", "1",
                   "--out", str(out)])
    calls = report["calls"]
    assert list(calls) == ["fresh", "reused-1", "fresh-2", "big-fresh", "big-reused", "dedicated", "big-dedicated"]
    fresh, reused, fresh_2 = calls["fresh"], calls["reused-1"], calls["fresh-2"]
    assert (fresh["call"], fresh["preparation"]["needed"]) == (1, True)
    assert (reused["pid"], reused["call"], reused["preparation"]["needed"]) == (fresh["pid"], 2, False)
    assert fresh_2["pid"] != fresh["pid"] and fresh_2["preparation"]["needed"]  # the control: a new worker
    assert calls["dedicated"]["pid"] == os.getpid() != fresh["pid"] and not calls["dedicated"]["zero_gpu"]
    assert fresh["zero_gpu"] and fresh["plain"]["tokens"] == 2 * 6 and calls["big-reused"]["plain"]["tokens"] == 4
    assert fresh["identical"] == "2/2" and fresh["speedup"] > 0
    summary = report["summary"]
    assert summary["reused_same_worker"] and summary["reused_prepared_nothing"]
    assert summary["steady_plain_tokens_per_second"] == reused["plain"]["tokens_per_second"]
    assert json.loads(out.read_text())["summary"] == json.loads(json.dumps(summary))
    assert "reused-1" in capsys.readouterr().out  # the table
