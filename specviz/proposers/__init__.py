"""Drafting methods, each behind the Proposer interface, selectable by name (specviz.methods, the registry)."""
from __future__ import annotations

from .adaptive import AdaptiveProposer
from .base import DeviceLookup, Draft, Feedback, Proposer, ProposerRequest
from .draft_model import ModelDrafter
from .eagle import EagleProposer
from .early_exit import EarlyExitDrafter
from .medusa import MedusaProposer
from .ngram import NgramProposer
from .plain import PlainProposer
from .retrieval import RetrievalProposer
from ..methods import METHODS  # noqa: F401  (re-exported: the names live apart from the code)

__all__ = ["METHODS", "AdaptiveProposer", "DeviceLookup", "Draft", "EagleProposer", "EarlyExitDrafter", "Feedback",
           "MedusaProposer", "ModelDrafter", "NgramProposer", "PlainProposer", "Proposer", "ProposerRequest",
           "RetrievalProposer"]
