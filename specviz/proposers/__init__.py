"""Drafting methods, each behind the Proposer interface, selectable by name."""
from __future__ import annotations

from .adaptive import AdaptiveProposer
from .base import Draft, Feedback, Proposer
from .draft_model import ModelDrafter
from .early_exit import EarlyExitDrafter
from .ngram import NgramProposer

METHODS = ("plain", "draft", "ngram", "early-exit", "adaptive")


class PlainProposer(Proposer):
    """No drafter: every step is one target forward that emits one token (the baseline)."""

    name = "plain"

    def propose(self, tokens, gamma):
        return self.empty_draft("cpu")  # on the host: nothing to allocate or copy on a GPU


__all__ = ["METHODS", "AdaptiveProposer", "Draft", "EarlyExitDrafter", "Feedback", "ModelDrafter",
           "NgramProposer", "PlainProposer", "Proposer"]
