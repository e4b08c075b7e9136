"""What the app serves with: the public profile (its checks at the boundary, its memory budget), where models are
placed, and the pool that loads them within that budget. This module owns that state: the rest of the app reads it
through profile(), pool() and placement(), and launch sets it (configure_profile, configure_placement) before the
first request; a test that serves as a public server does so within served_as."""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..models.loading import DEFAULT_MODEL, LoadedModel, load_model, pick_device, pick_dtype
from .model_pool import ModelPool
from .public import Profile, profile_from_env


@dataclass
class Placement:
    """Where the app puts models, set once at launch (`python app.py --device-map auto ...`): a target too
    large for one GPU is sharded over this machine's GPUs with accelerate; the drafter sits on one device."""

    device_map: str | dict | None = None
    max_memory: str | dict | None = None
    draft_device: str | None = None


@dataclass
class Serving:
    """The state this module owns: one at a time (_now)."""

    profile: Profile
    pool: ModelPool
    placement: Placement


# who names models held outside any request (sessions.py: its sessions' unfinished runs)
_holders: list[Callable[[], set[str]]] = []


def count_in_use(holder: Callable[[], set[str]]) -> None:
    """Have every pool keep loaded the models `holder()` names: models held outside any request."""
    _holders.append(holder)


def _held_elsewhere() -> set[str]:
    return set().union(*(holder() for holder in _holders))


def pool_for(profile: Profile) -> ModelPool:
    """A pool within the profile's memory budget; the default model is never unloaded (every page starts with it)."""
    return ModelPool(profile.memory_budget, profile.dtype_bytes, keep={DEFAULT_MODEL}, in_use=_held_elsewhere)


_now = Serving(Profile(), pool_for(Profile()), Placement())  # local until launch says otherwise (configure_profile)


def profile() -> Profile:
    return _now.profile


def pool() -> ModelPool:
    return _now.pool


def placement() -> Placement:
    return _now.placement


def configure_profile(profile: Profile) -> None:
    """The profile the app serves with (set once at launch): its checks at the boundary, its memory budget."""
    _now.profile, _now.pool = profile, pool_for(profile)


def configure_placement(device_map=None, max_memory=None, draft_device=None) -> None:
    _now.placement = Placement(device_map or None, max_memory or None, draft_device or None)


@contextlib.contextmanager
def served_as(profile: Profile):
    """Serve with `profile` (and a pool made for it) within the block, then with what served before."""
    before = _now.profile, _now.pool
    configure_profile(profile)
    try:
        yield
    finally:
        _now.profile, _now.pool = before


def machine_profile(env=None) -> Profile:
    """The profile for this process: public on a Space or with SPECVIZ_PUBLIC=1 (public.py), its memory budget
    from the memory of the device models load on (a GPU's, else the host's) and their dtype there."""
    device = pick_device(None)
    memory = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    return profile_from_env(env, device_memory=memory, dtype_bytes=pick_dtype(None, device).itemsize)


def load_target(name: str) -> LoadedModel:
    """A target from the process-wide registry, loaded on first use within the pool's budget."""
    placed = _now.placement
    return _now.pool.load(name, lambda: load_model(name, device_map=placed.device_map, max_memory=placed.max_memory))
