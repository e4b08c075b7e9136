"""Drafting methods, each behind the Proposer interface, selectable by name."""
from __future__ import annotations

from .adaptive import AdaptiveProposer
from .base import DeviceLookup, Draft, Feedback, Proposer
from .draft_model import ModelDrafter
from .eagle import EagleProposer
from .early_exit import EarlyExitDrafter
from .medusa import MedusaProposer
from .ngram import NgramProposer
from .retrieval import RetrievalProposer
from ..methods import METHODS  # noqa: F401  (re-exported: the names live apart from the code)
TREE_METHODS = ("ngram", "retrieval", "medusa", "eagle")  # their proposers set drafts_trees


class PlainProposer(Proposer):
    """No drafter: every step is one target forward that emits one token (the baseline)."""

    name = "plain"
    drafts = False
    drafts_on_host = True

    def propose(self, tokens, gamma):
        return self.empty_draft("cpu")  # on the host: nothing to allocate or copy on a GPU

    def device_lookup(self, settings, runner):
        return DeviceLookup()  # nothing to draft: the loop verifies one position a step


__all__ = ["METHODS", "TREE_METHODS", "AdaptiveProposer", "Draft", "EagleProposer", "EarlyExitDrafter", "Feedback",
           "MedusaProposer", "ModelDrafter", "NgramProposer", "PlainProposer", "Proposer", "RetrievalProposer"]
