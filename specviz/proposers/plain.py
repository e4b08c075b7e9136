"""`plain`: no drafter, the baseline every method is measured against."""
from __future__ import annotations

from .base import DeviceLookup, Proposer, ProposerRequest


class PlainProposer(Proposer):
    """No drafter: every step is one target forward that emits one token (the baseline)."""

    name = "plain"
    drafts_on_host = True

    def propose(self, tokens, gamma):
        return self.empty_draft("cpu")  # on the host: nothing to allocate or copy on a GPU

    def device_lookup(self, settings, runner):
        return DeviceLookup()  # nothing to draft: the loop verifies one position a step


def build(request: ProposerRequest) -> PlainProposer:
    """`plain`'s proposer (specviz.methods)."""
    return PlainProposer()
