"""A run as a page or a client asks for it (RunRequest): its prompt, settings, models, and the drafter it loads."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import methods as registry
from ..models.loading import DEFAULT_MODEL
from ..options import EngineOptions
from ..proposers.distilled import DISTILLED
from ..settings import DecodeSettings

# methods that take the drafter field (adaptive drafts with it if given)
USES_DRAFT_MODEL = registry.names(uses_draft_model=True)


@dataclass
class RunRequest:
    prompt: str
    method: str
    target: str = DEFAULT_MODEL
    draft: str | None = None
    settings: DecodeSettings = field(default_factory=DecodeSettings)
    compare_plain: bool = True
    exact: bool | None = None  # the exact mode of the target's forward (a GPU's); None: as the environment says


def engine_options(request: RunRequest) -> EngineOptions:
    """The engine's switches for a request's runs: the environment's, with the request's exact mode."""
    options = EngineOptions.from_environment()
    return options if request.exact is None else replace(options, exact=request.exact)



def model_name(value) -> str | None:
    """A model field's value: None when empty (or 'none')."""
    text = str(value or "").strip()
    return None if text.lower() in ("", "none") else text


def drafter_for(method: str, target_name: str, draft_value) -> str | None:
    """The drafter a run loads: the one chosen, for the methods that take one; for `draft` on the default
    target with none chosen, the draft model distilled from it (shipped in assets/drafters)."""
    if method not in USES_DRAFT_MODEL:
        return None
    chosen = model_name(draft_value)
    if chosen is None and method == "draft" and target_name == DEFAULT_MODEL:
        return DISTILLED
    return chosen

