"""The model pool (specviz/ui/model_pool.py): what a model needs is known from its config before it loads, and
models nobody uses are unloaded, least recently used first, to keep within the budget. Real (tiny, random)
models in the process-wide registry."""
import pytest

from specviz.ui.model_pool import ModelPool, estimate_bytes, model_bytes
from specviz.models.loading import load_model, loaded_models, unload_all
from specviz.ui.public import MemoryBudgetError
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
