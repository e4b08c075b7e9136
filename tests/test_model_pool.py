"""The model pool (specviz/service/model_pool.py): what a model needs is known from its config before it loads, and
models nobody uses are unloaded, least recently used first, to keep within the budget. Real (tiny, random)
models in the process-wide registry."""
import pytest

from specviz.service.model_pool import ModelPool, estimate_bytes, model_bytes
from specviz.models.loading import load_model, loaded_models, unload_all
from specviz.service.public import MemoryBudgetError
from specviz.models.testing import save_tiny_model

A, B, C = "random:llama-tiny", "random:llama-tiny,layers=1", "random:llama-tiny,layers=3"
BIG = "random:llama-8b"


@pytest.fixture
def pool_of():
    """A pool whose budget is what other tests left loaded (kept, untouched) plus `room` bytes."""
    before = {m.name for m in loaded_models()}
    taken = sum(model_bytes(m) for m in loaded_models())

    def make(room):
        return ModelPool(None if room is None else taken + room, 4, keep=before | {"default"})

    yield make
    unload_all(keep=before)


def names():
    return {m.name for m in loaded_models()}


def loader(name, calls=None):
    def load():
        if calls is not None:
            calls.append(name)
        return load_model(name, device="cpu", dtype="float32")
    return load


def test_a_random_shape_is_estimated_as_it_loads():
    assert estimate_bytes(A, 4) == model_bytes(load_model(A, device="cpu", dtype="float32"))
    unload_all(keep={m.name for m in loaded_models()} - {A})


def test_a_folder_is_estimated_from_its_config_before_it_loads(tmp_path):
    folder = save_tiny_model(tmp_path / "tiny")
    need = estimate_bytes(folder, 4)
    assert need == model_bytes(load_model(folder, device="cpu", dtype="float32"))
    unload_all(keep={m.name for m in loaded_models()} - {folder})


def test_the_least_recently_used_model_makes_room(pool_of):
    need = {name: estimate_bytes(name, 4) for name in (A, B, C)}
    pool = pool_of(need[A] + need[C] + need[B] // 2)  # room for A and C, not for all three
    pool.load(A, loader(A))
    pool.load(B, loader(B))
    pool.load(A, loader(A))  # A used again: B is now the least recently used
    pool.load(C, loader(C))
    assert A in names() and C in names() and B not in names()


def test_a_budget_large_enough_keeps_them_all(pool_of):
    pool = pool_of(10 * estimate_bytes(C, 4))  # control: room for all three
    for name in (A, B, C):
        pool.load(name, loader(name))
    assert {A, B, C} <= names()


def test_a_model_in_use_is_not_unloaded_to_make_room(pool_of):
    pool = pool_of(estimate_bytes(A, 4) + estimate_bytes(B, 4))
    pool.load(A, loader(A))
    pool.load(B, loader(B))
    calls = []
    with pool.using(A, B):
        with pytest.raises(MemoryBudgetError, match="try again"):
            pool.load(C, loader(C, calls))
    assert calls == [] and {A, B} <= names()
    pool.load(C, loader(C, calls))  # once they are free, C takes their place
    assert calls == [C] and C in names()


def test_a_model_larger_than_the_budget_is_refused_before_anything_loads(pool_of):
    calls = []
    with pytest.raises(MemoryBudgetError, match="needs about 3[0-9].[0-9] GiB"):
        pool_of(1 << 30).load(BIG, loader(BIG, calls))
    assert calls == []


def test_without_a_budget_nothing_is_refused_and_switching_unloads_the_unused(pool_of):
    pool = pool_of(None)  # control: a local user's pool
    calls = []
    pool.load(A, loader(A, calls))
    pool.load(B, loader(B, calls))  # B replaces A, as the app always did on a model switch
    assert calls == [A, B] and B in names() and A not in names()


def test_a_model_too_large_for_the_free_memory_is_refused_before_loading_in_every_profile(pool_of, monkeypatch):
    """A local user's pool has no budget, yet an 8B model in float32 on a 23 GiB machine ended the server: what is
    free now is checked for every profile (here stated by SPECVIZ_MEMORY_AVAILABLE)."""
    from specviz.models.memory import NotEnoughMemoryError

    monkeypatch.setenv("SPECVIZ_MEMORY_AVAILABLE", "4GiB")
    calls = []
    for budget in (None, 1 << 40):  # local (no budget) and a server with a budget far above what is free
        with pytest.raises(NotEnoughMemoryError, match=r"random:llama-8b needs about 3[0-9]\.[0-9] GiB in float32 "
                                                       r"and 4\.0 GiB is SPECVIZ_MEMORY_AVAILABLE"):
            pool_of(budget).load(BIG, loader(BIG, calls))
    assert calls == [] and BIG not in names()
    pool_of(None).load(A, loader(A, calls))  # the control: a model that fits loads under the same figure
    assert calls == [A]


def test_the_memory_check_counts_what_unloading_frees_and_says_where_the_figure_comes_from():
    from specviz.models.memory import HEADROOM, GiB, memory_refusal, parse_size

    assert parse_size("12GiB") == 12 * GiB and parse_size("800MB") == 800_000_000
    need = 10 * GiB
    refusal = memory_refusal("m", need, "bfloat16", 6 * GiB, "free on the GPU")
    assert "m needs about 10.0 GiB in bfloat16 and 6.0 GiB is free on the GPU" in refusal
    assert memory_refusal("m", need, "bfloat16", 6 * GiB, "free on the GPU", freed=5 * GiB) is None  # replaced
    partly = memory_refusal("m", need, "bfloat16", 6 * GiB, "free on the GPU", freed=GiB)
    assert "6.0 GiB is free on the GPU (7.0 GiB once the models it replaces are unloaded)" in partly
    assert memory_refusal("m", need, "bfloat16", need + HEADROOM, "x") is None  # the control: it fits
    assert memory_refusal("m", None, "bfloat16", GiB, "x") is None  # a size not known is left to the load


def test_the_loading_line_says_random_weights_are_made_here():
    from specviz.ui.readouts import loading_message

    line = loading_message(["random:llama-8b", None], 3.0, False)
    assert "random weights of that shape are made here, nothing is downloaded" in line and "Hub" not in line
    assert "Hub" in loading_message(["Qwen/Qwen2.5-0.5B-Instruct"], 3.0, False)  # the control: a Hub id downloads
