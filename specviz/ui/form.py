"""The boundary: every value a request brings in (a widget's, or an API caller's raw JSON) is checked and
converted here, by one function, into one Form, before anything else reads it. A bad value gets a message that
names the field and says what it takes; nothing past this point sees a wrong type, a NaN, a huge number, a lone
surrogate or a null byte. No gradio here: tests call it directly (tests/test_ui_form.py)."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import InvalidSettingError
from ..api import DEFAULT_MODEL
from ..methods import methods, names
from ..service import serving
from ..service.calls import SELF_DRAFT
from ..service.public import SHIPPED_DRAFTERS, Profile, check_model
from ..settings import BOUNDS, MAX_NEW_TOKENS, PUBLIC_MAX_TREE, DecodeSettings, check_prompt_text  # noqa: F401

MAX_NAME = 300  # characters of a model name
MAX_STEPS = 100_000  # the step slider's end: a run of MAX_NEW_TOKENS has fewer steps
MAX_SEED = 2 ** 63 - 1  # torch.Generator.manual_seed's range


@dataclass(frozen=True)
class Form:
    """A request's values after the boundary: every field any endpoint takes, each valid."""
    prompt: str = ""
    method: str = "ngram"
    target: str = DEFAULT_MODEL
    draft: str | None = None  # the drafter field as given (None: none); drafter_for picks what loads
    settings: DecodeSettings = field(default_factory=DecodeSettings)
    compare_plain: bool = True
    step_mode: bool = False
    exact: bool | None = None  # the target's forward in the exact mode (GPU); None: as the server's environment says
    methods: tuple[str, ...] = ()  # Compare
    runs: int = 150  # lesson 2, /distribution
    wrong: bool = True  # /distribution: the wrong verifier too
    rounding: bool = True  # /bugs: bfloat16 greedy output beside float32's too
    batch_method: str = "retrieval"  # Batch
    batch_sizes: str = "1,2,4,8"
    batch_tokens: int = 32
    seconds_per_step: float = 0.5  # Replay
    step: int = 0  # the step slider
    alpha: float = 0.7  # lesson 4's what-if sliders
    what_if_gamma: int = 4
    cost: float = 0.05


class FormError(InvalidSettingError):
    """A request value the boundary refused; the message names the field and what it takes."""


# -- one check per kind of value ---------------------------------------------------------------------------------

def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def text(name: str, value, limit: int | None = None) -> str:
    if not isinstance(value, str):
        raise FormError(f"{name} must be text, got {_shown(value)}")
    if "\x00" in value:
        raise FormError(f"{name} contains a null character: remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FormError(f"{name} contains a character that is not valid text (a lone surrogate): remove it") from None
    if limit is not None and len(value) > limit:
        raise FormError(f"{name} is {len(value):,} characters long; this server takes at most {limit:,}")
    return value


def whole(name: str, value, low: int, high: int | None = None) -> int:
    """A whole number: an int, or a float with no fraction (sliders send floats); never a bool, NaN or text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormError(f"{name} must be a whole number, got {_shown(value)}")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise FormError(f"{name} must be a whole number, got {_shown(value)}")
    value = int(value)
    if value < low or (high is not None and value > high):
        allowed = f"at least {low}" if high is None else f"between {low} and {high}"
        raise FormError(f"{name} must be {allowed}, got {value}")
    return value


def real(name: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FormError(f"{name} must be a number, got {_shown(value)}")
    if not low <= value <= high:
        raise FormError(f"{name} must be between {low:g} and {high:g}, got {value:g}")
    return float(value)


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise FormError(f"{name} must be true or false, got {_shown(value)}")
    return value


def choice(name: str, value, options) -> str:
    if not isinstance(value, str) or value not in options:
        raise FormError(f"{name} must be one of {', '.join(options)}, got {_shown(value)}")
    return value


def model(name: str, value, profile: Profile, role: str) -> str | None:
    """A model field: None when empty or 'none'; else a name the profile offers (any, for a local user)."""
    if value is None:
        return None
    cleaned = text(name, value, MAX_NAME).strip()
    if cleaned.lower() in ("", "none"):
        return None
    check_model(cleaned, profile, role)
    return cleaned


# -- the fields: name -> (how to read it into the Form) ------------------------------------------------------------

def _seed(value):
    return None if value is None or value == "" else whole("seed", value, 0, MAX_SEED)


def batch_methods() -> tuple[str, ...]:
    """The Batch tab's choices: the methods that batch and draft (specviz.methods), and the target drafting for
    itself."""
    return (*(m.name for m in methods() if m.batchable and m.drafts), SELF_DRAFT)


def _methods(value):
    if not isinstance(value, (list, tuple)) or len(value) > len(names()):
        raise FormError(f"methods must be a list of methods, got {_shown(value)}")
    return tuple(choice("each method", m, names(drafts=True)) for m in value)


DECODING = ("max_new_tokens", "gamma", "temperature", "top_p", "seed", "tree", "draft_stop")

FIELDS: dict[str, Callable] = {  # (value, profile) -> the Form's value
    "prompt": lambda v, p: text("the prompt", v, p.max_prompt_chars),
    "method": lambda v, p: choice("method", v, names()),
    "target": lambda v, p: _target(model("target", v, p, "target model")),
    "draft": lambda v, p: model("drafter", v, p, "drafter"),
    "max_new_tokens": lambda v, p: _max_new(v),
    "gamma": lambda v, p: bounded("gamma", v, p),
    "temperature": lambda v, p: bounded("temperature", v, p),
    "top_p": lambda v, p: real("top-p", v, 0.0, 1.0),
    "seed": lambda v, p: _seed(v),
    "tree": lambda v, p: bounded("tree", v, p),
    "draft_stop": lambda v, p: real("draft stop", v, 0.0, 1.0),
    "compare_plain": lambda v, p: flag("also run plain decoding", v),
    "step_mode": lambda v, p: flag("step mode", v),
    "exact": lambda v, p: flag("exact mode", v),
    "methods": lambda v, p: _methods(v),
    "runs": lambda v, p: whole("runs", v, 10, 300 if p.public else 1000),
    "wrong": lambda v, p: flag("wrong", v),
    "rounding": lambda v, p: flag("rounding", v),
    "batch_method": lambda v, p: choice("method", v, batch_methods()),
    "batch_sizes": lambda v, p: text("batch sizes", v, 100),
    "batch_tokens": lambda v, p: whole("new tokens", v, 1, 256),
    "seconds_per_step": lambda v, p: real("replay speed", v, 0.0, 60.0),
    "step": lambda v, p: whole("step", v, 0, MAX_STEPS),
    "alpha": lambda v, p: real("α", v, 0.0, 0.99),
    "what_if_gamma": lambda v, p: whole("γ", v, 1, 12),
    "cost": lambda v, p: real("c", v, 0.0, 1.0),
}


def bounded(name: str, value, profile: Profile):
    """A setting read by its row of specviz.settings.BOUNDS, the one the page's slider is built from."""
    bound = BOUNDS[name]
    high = bound.top(profile.public)
    if name == "temperature":
        return real(bound.label, value, bound.low, min(high, profile.max_temperature))
    return whole(bound.label, value, int(bound.low), None if high is None else int(high))


def _target(name: str | None) -> str:
    """A target field: a shipped drafter is no target (its files hold a few layers that draft for the default)."""
    if name in SHIPPED_DRAFTERS:
        raise FormError(f"target: {name!r} is a drafter (a few layers trained to draft for the default target), not "
                        f"a target: choose it as the drafter of the draft method, and a target such as 'default'")
    return name or DEFAULT_MODEL


def _max_new(value) -> int:
    number = whole("max new tokens", value, 0)  # 0 is left to DecodeSettings.validate's message
    if number > MAX_NEW_TOKENS:
        raise FormError(f"max new tokens is limited to {MAX_NEW_TOKENS} here, got {number}")
    return number


def read_form(values: Mapping[str, object], profile: Profile = Profile()) -> Form:
    """The one function from a request's values to a Form: each value checked by its field's rule (None leaves
    the default), the decoding settings checked together (DecodeSettings.validate), the models against the
    profile. Raises FormError (or the settings' InvalidSettingError) with a message for the person asking."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise FormError(f"unknown field {unknown[0]!r}")
    read = {name: FIELDS[name](value, profile) for name, value in values.items()
            if value is not None or name in ("draft", "seed")}
    settings = DecodeSettings(**{name: read.pop(name) for name in DECODING if name in read}).validate()
    form = Form(**read, settings=settings)
    if "prompt" in values:
        check_prompt_text(form.prompt)
    return form


def settings_from_form(max_new_tokens, gamma, temperature, top_p=1.0, seed=None, tree=0,
                       draft_stop=0.0) -> DecodeSettings:
    """Widget values (sliders give floats, an empty number box None) to validated DecodeSettings, through the
    boundary's one reader (read_form)."""
    values = dict(max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature, top_p=top_p, seed=seed,
                  tree=tree, draft_stop=draft_stop)
    return read_form({k: (None if v == "" else v) for k, v in values.items()}, serving.profile()).settings
