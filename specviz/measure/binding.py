"""What binds a forward on this device, decided from one measured ratio: a forward over k positions (or a verify
pass of k = gamma + 1) against a forward over one. Lesson 3 (16 positions), lesson 5 and the Batch tab (gamma + 1
positions at batch 1) measure different widths on the same machine, so each is turned into the same figure, the
cost each position beyond the first adds as a share of a one-position forward, and one rule reads it: two
measurements of one machine then tell one story.

A forward bound by reading the weights costs the same at any width (the share is about 0); one bound by the
arithmetic costs k times one (the share is 1). Between the two, each extra position costs a little.
"""
from __future__ import annotations

from dataclasses import dataclass

WEIGHTS_BOUND = 0.03  # at most 3% of a forward a position (16 positions within 1.45x of one): the reads bind
ARITHMETIC_BOUND = 0.5  # at least half a forward a position: the arithmetic binds


@dataclass(frozen=True)
class Binding:
    kind: str  # "weights", "mixed" or "arithmetic"
    positions: int  # k, the width measured against one position
    ratio: float  # forward(k) / forward(1), measured
    per_position: float  # (ratio - 1) / (k - 1): what each position beyond the first adds, as a share of one forward

    def sentence(self, say_ratio: bool = True) -> str:
        """The measurement and what it means, in one sentence (no trailing space); say_ratio=False where the
        ratio was just stated."""
        share = f"each position beyond the first added {max(self.per_position, 0.0):.1%} of a forward"
        measured = (f"a forward of {self.positions} positions measured {self.ratio:.2f}× one of a single position, "
                    f"so {share}" if say_ratio else share)
        if self.kind == "weights":
            return (measured + ": reading the weights, not the arithmetic, binds a forward on this device, so "
                    "checking drafts is nearly free.")
        if self.kind == "arithmetic":
            return (measured + ": the arithmetic binds a forward on this device, so each checked draft costs "
                    "about as much as writing a token.")
        return (measured + ": on this device neither the weight reads nor the arithmetic binds a forward alone, so "
                "checking a few drafts is cheap but not free, and long drafts add up.")


def what_binds(ratio: float, positions: int) -> Binding:
    """The one rule lessons 3 and 5 and the Batch tab read a measured ratio by (positions >= 2)."""
    if positions < 2:
        raise ValueError("a ratio needs a forward over at least 2 positions against one over 1")
    share = (ratio - 1.0) / (positions - 1)
    kind = "weights" if share <= WEIGHTS_BOUND else "arithmetic" if share >= ARITHMETIC_BOUND else "mixed"
    return Binding(kind, positions, ratio, share)
