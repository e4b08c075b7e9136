"""Medusa's heads as networks (Medusa, Cai et al. 2024): the residual blocks, and the heads bound to their target's
output layers; the proposer that drafts with them is medusa.py's."""
from __future__ import annotations

import torch
from torch import nn

from .draft_head import DraftHead


class ResBlock(nn.Module):
    """Medusa's residual block; zero-initialised weights make it the identity at the start of training."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x):
        return x + nn.functional.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """num_heads stacks of num_layers ResBlocks. Parameter names follow FasterDecoding's `medusa_head`
    ModuleList ("{head}.{layer}.linear.weight"), so their files load unchanged."""

    def __init__(self, hidden_size: int, num_heads: int, num_layers: int = 1):
        super().__init__()
        self.blocks = nn.ModuleList(
            [nn.Sequential(*[ResBlock(hidden_size) for _ in range(num_layers)]) for _ in range(num_heads)]
        )

    @property
    def num_heads(self) -> int:
        return len(self.blocks)

    def forward(self, hidden: torch.Tensor, count: int | None = None) -> torch.Tensor:
        """hidden [..., H] -> features [count, ..., H] of the first `count` heads."""
        return torch.stack([block(hidden) for block in self.blocks[: count or self.num_heads]])

    def state_dict_published(self) -> dict:
        return {k.removeprefix("blocks."): v for k, v in self.state_dict().items()}

    def load_published(self, state: dict) -> None:
        self.load_state_dict({f"blocks.{k}": v for k, v in state.items()})


class MedusaDrafter:
    """Heads bound to their target: one output layer per head (published Medusa-1 heads carry their own) or
    the target's, shared by all heads (heads trained here)."""

    def __init__(self, heads: MedusaHeads, outputs: list[DraftHead], source: str):
        self.heads = heads
        self.outputs = outputs  # one per head, or a single shared one
        self.source = source

    def logits(self, hidden: torch.Tensor, count: int) -> torch.Tensor:
        """hidden [H] -> logits [count, V] of heads 0..count-1."""
        features = self.heads(hidden, count)  # [count, H]
        if len(self.outputs) == 1:
            return self.outputs[0].full_logits(features)
        return torch.stack([self.outputs[k].full_logits(features[k]) for k in range(count)])

    def top_tokens(self, hidden: torch.Tensor, count: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [H] -> each of heads 0..count-1's k likeliest tokens and log probabilities, [count, k]."""
        return self.top_tokens_of(self.heads(hidden, count), k)

    def top_tokens_of(self, features: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """top_tokens from heads 0..count-1's features [count, H] (the device computes them batched)."""
        if len(self.outputs) == 1:
            return self.outputs[0].top_tokens(features, k)
        tops = [self.outputs[i].top_tokens(features[i], k) for i in range(features.shape[0])]
        return torch.stack([ids for ids, _ in tops]), torch.stack([values for _, values in tops])
