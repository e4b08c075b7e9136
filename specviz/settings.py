"""Decoding settings and their validation: one place that says which values are allowed."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InvalidSettingError

MAX_GAMMA = 32
# draft tokens in a tree: with the last accepted token, 1,024 positions a verify pass. Large trees are for a GPU,
# which verifies many positions for little more than one (on a CPU every node costs); they raise Medusa's tau
# most (docs/drafters.md, "Trained drafters")
MAX_TREE = 1023
# below it a temperature is greedy in all but rounding, and far below it (1e-300) logits / temperature overflow
# float32 to inf and the sampler's probabilities to NaN
MIN_TEMPERATURE = 0.01
# far above it every run is noise to its full length: the page's slider, the API and the command line end here
MAX_TEMPERATURE = 2.0
PUBLIC_MAX_TREE = 64  # a public server's tree: larger trees are for a dedicated GPU
MAX_NEW_TOKENS = 512  # the app's and the API's limit: a shared machine serves several users


@dataclass(frozen=True)
class Bound:
    """The values one setting takes: the page's slider, the API's boundary and the command line read the same
    row, so that a value one of them takes is never silently changed by another."""
    label: str  # how a message names it
    low: float
    high: float | None  # None: no upper end (the command line's max-new-tokens)
    public_high: float | None = None  # a public server's end, where lower than high (the page's slider there too)
    app_high: float | None = None  # the app's and the API's end, where lower than the command line's

    def top(self, public: bool = False, app: bool = True) -> float | None:
        """The end in one place: a public server, the app (and its API), or the command line (app=False)."""
        if public and self.public_high is not None:
            return self.public_high
        if app and self.app_high is not None:
            return self.app_high
        return self.high

    def range_text(self, public: bool = False, app: bool = True) -> str:
        high = self.top(public, app)
        return f"at least {self.low:g}" if high is None else f"between {self.low:g} and {high:g}"


BOUNDS = {  # one row a setting (DecodeSettings' field names)
    "gamma": Bound("gamma", 1, MAX_GAMMA),
    "tree": Bound("draft tree", 0, MAX_TREE, public_high=PUBLIC_MAX_TREE),
    "temperature": Bound("temperature", 0, MAX_TEMPERATURE),
    "max_new_tokens": Bound("max new tokens", 1, None, app_high=MAX_NEW_TOKENS),
}


@dataclass(frozen=True)
class DecodeSettings:
    max_new_tokens: int = 128
    gamma: int = 4  # draft tokens per step (the adaptive method treats it as the maximum)
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k filter
    top_p: float = 1.0
    seed: int | None = None
    stop_at_eos: bool = True
    tree: int = 0  # 0: draft a chain of gamma tokens; N: a tree of up to N tokens and depth gamma (tree.py)
    # a draft model (draft, early-exit) ends its chain after a token it gives less than this probability, so
    # that the target is not asked to verify guesses the drafter itself doubts; 0: always gamma tokens
    draft_stop: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def validate(self) -> "DecodeSettings":
        _check_int("gamma", self.gamma, 1, MAX_GAMMA)
        _check_int("tree", self.tree, 0, MAX_TREE)
        _check_int("max-new-tokens", self.max_new_tokens, 1, None)
        _check_int("top-k", self.top_k, 0, None)
        temperature = _as_number("temperature", self.temperature)
        if temperature < 0:
            raise InvalidSettingError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        if temperature > MAX_TEMPERATURE:
            raise InvalidSettingError(f"temperature must be between 0 and {MAX_TEMPERATURE:g} (0 means greedy), got "
                                      f"{self.temperature:g}: far above {MAX_TEMPERATURE:g} every token is noise")
        if 0 < temperature < MIN_TEMPERATURE:
            raise InvalidSettingError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got "
                                      f"{self.temperature:g}: use 0 for the most probable token every time")
        top_p = _as_number("top-p", self.top_p)
        if not 0 < top_p <= 1:
            raise InvalidSettingError(f"top-p must be in (0, 1], got {self.top_p}")
        draft_stop = _as_number("draft-stop", self.draft_stop)
        if not 0 <= draft_stop < 1:
            raise InvalidSettingError("draft-stop must be in [0, 1) (0: always draft gamma tokens), got "
                                      f"{self.draft_stop}")
        if self.seed is not None:
            _check_int("seed", self.seed, 0, None)
        return self


def check_prompt_text(prompt) -> None:
    """The one check of a prompt's text, made before any model is loaded."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidSettingError("the prompt is empty; type some text")


def _as_number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSettingError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidSettingError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _check_int(name: str, value, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"between {low} and {high}"
        raise InvalidSettingError(f"{name} must be {allowed}, got {value}")
