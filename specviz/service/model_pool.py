"""Models a server loads for its requests, kept within a memory budget (specviz.service.public): what a model needs is
estimated from its config before anything of it loads, and models that no request uses are unloaded, least
recently used first, to make room. Without a budget (a local user), loading another model unloads every model
that no run uses, so that switching models never piles them up in memory."""
from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from ..errors import ModelLoadError
from ..models.loading import DEFAULT_MODEL, LoadedModel, loaded_models, unload_all
from .public import PRESETS, SHIPPED_DRAFTERS, evictions, needed_bytes, parameters
from ..models.memory import NotEnoughMemoryError, available_bytes, memory_refusal
from ..models.random_target import is_random_target, parse_shape


def shape_of(config) -> dict | None:
    """The numbers of a config that size its KV cache (None when it does not state them)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    try:
        heads = int(config.num_attention_heads)
        return {"hidden": int(config.hidden_size), "heads": heads, "layers": int(config.num_hidden_layers),
                "kv_heads": int(getattr(config, "num_key_value_heads", None) or heads)}
    except (AttributeError, TypeError, ValueError):
        return None


def read_config(name: str):
    """A model's config without its weights: config.json of a folder or a Hub id (the cache first), or a GGUF
    file's header."""
    from transformers import AutoConfig

    path = Path(name).expanduser()
    try:
        if path.is_file() and path.suffix == ".gguf":
            return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        if path.is_dir():
            return AutoConfig.from_pretrained(str(path))
        try:
            return AutoConfig.from_pretrained(name, local_files_only=True)
        except OSError:
            return AutoConfig.from_pretrained(name)
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"cannot read the config of '{name}': {str(error).splitlines()[0]}") from None


def count_parameters(config) -> int:
    """Parameters of the model a config describes, counted on the meta device (nothing is allocated)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def estimate_bytes(name: str, dtype_bytes: int) -> int:
    """What loading `name` will take, before it loads: the presets from their stated shapes, a random target
    from its spec, anything else from its config."""
    if name in SHIPPED_DRAFTERS:
        return 0  # a few layers that borrow the target's embedding (assets/drafters)
    if name in PRESETS:
        return needed_bytes(parameters(PRESETS[name]), dtype_bytes, PRESETS[name])
    if is_random_target(name):
        shape = parse_shape(name)
        shape = dict(shape, tied=False, qkv_bias=False)
        return needed_bytes(parameters(shape), dtype_bytes, shape)
    config = read_config(name)
    return needed_bytes(count_parameters(config), dtype_bytes, shape_of(config))


def check_fits(name: str, freed: int = 0) -> None:
    """Refuse (models.memory.NotEnoughMemoryError) a model whose weights, at the dtype it will load in here, do
    not fit the memory free now plus `freed` (what the models it replaces free); a model whose size cannot be
    told before loading (an unreadable config) is left to its load, which says what is wrong."""
    from ..models.loading import pick_device, pick_dtype

    if not (is_random_target(name) or name in PRESETS or Path(name).expanduser().exists()):
        return  # a Hub id: its config may first have to be downloaded, which its load does anyway
    device = pick_device(None)
    dtype = pick_dtype(None, device)
    try:
        need = estimate_bytes(name, dtype.itemsize)
    except Exception:  # why: the load itself reports a missing or unreadable model better than a guess here
        return
    free, source = available_bytes(on_gpu=device.type == "cuda")
    refusal = memory_refusal(name, need, str(dtype).replace("torch.", ""), free, source, freed)
    if refusal:
        raise NotEnoughMemoryError(refusal)


def model_bytes(model: LoadedModel) -> int:
    """What a loaded model takes, counted as estimate_bytes counts it, from its own parameters."""
    count = sum(p.numel() for p in model.model.parameters())
    return needed_bytes(count, model.dtype.itemsize, shape_of(model.model.config))


class ModelPool:
    """Loads models for requests within `budget` bytes (None: no budget). `keep`: models never unloaded (the
    default, which every page starts with); `in_use`: a function naming models held outside any request (a
    paused run of a session)."""

    def __init__(self, budget: int | None = None, dtype_bytes: int = 4, keep: Iterable[str] = (DEFAULT_MODEL,),
                 in_use: Callable[[], set[str]] = set):
        self.budget, self.dtype_bytes, self.keep = budget, dtype_bytes, frozenset(keep)
        self._held_elsewhere = in_use
        self._users: Counter[str] = Counter()
        self._last_used: dict[str, float] = {}
        self._lock = threading.RLock()  # one load at a time: two loads never both count the same free memory

    def hold(self, *names: str | None) -> tuple[str, ...]:
        """Marks models in use (not unloaded to make room) until release(): what a request or a run holds."""
        held = tuple(n for n in names if n)
        with self._lock:
            self._users.update(held)
        return held

    def release(self, held: tuple[str, ...]) -> None:
        with self._lock:
            self._users.subtract(held)
            now = time.monotonic()
            for name in held:
                self._last_used[name] = now
                if self._users[name] <= 0:
                    del self._users[name]

    @contextlib.contextmanager
    def using(self, *names: str | None):
        """Models held for the duration of a request."""
        held = self.hold(*names)
        try:
            yield
        finally:
            self.release(held)

    def in_use(self) -> set[str]:
        with self._lock:
            return {name for name, count in self._users.items() if count > 0} | set(self._held_elsewhere())

    def load(self, name: str, loader: Callable[[], LoadedModel]) -> LoadedModel:
        """`loader()`'s model (models.load_model or a drafter's load), after making room for it: its need is
        estimated before anything of it loads, and models nobody uses are unloaded, least recently used first.
        Raises public.MemoryBudgetError when it cannot fit."""
        with self._lock:
            current = {m.name: m for m in loaded_models()}
            if name not in current:
                need = estimate_bytes(name, self.dtype_bytes) if self.budget is not None else 0
                order = sorted(current, key=lambda n: self._last_used.get(n, 0.0))
                sizes = {n: model_bytes(current[n]) for n in order}
                victims = evictions([(n, sizes[n]) for n in order], self.in_use() | {name}, need,
                                    self.budget, self.keep)
                check_fits(name, sum(sizes[n] for n in victims))  # in every profile, a budget or none
                if victims:
                    unload_all(keep=set(current) - set(victims))
            model = loader()
            self._last_used[name] = time.monotonic()
            return model

    def loaded(self) -> list[tuple[str, int]]:
        """(name, bytes) of every loaded model, least recently used first."""
        current = {m.name: m for m in loaded_models()}
        return [(n, model_bytes(current[n])) for n in sorted(current, key=lambda n: self._last_used.get(n, 0.0))]
