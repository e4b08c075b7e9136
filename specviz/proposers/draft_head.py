"""What trained drafters (Medusa heads, EAGLE) borrow from their target, and their output layer.

A draft head may score only the few thousand most frequent tokens (EAGLE-3, FR-Spec): on a CPU the target's
49,152 x 576 output layer costs a small drafter more than the rest of it. Verification stays exact, because
the target still scores the full vocabulary: the drafter's q is its distribution over that subset (zero
elsewhere), after the same warping as p.
"""
from __future__ import annotations

import torch
from torch import nn

from ..models import configs
from ..runners.onednn import onednn_allowed, onednn_linear, pack_matrix


class DefaultRotary:
    """Rotary embedding with base theta (when the target has no rotary module to borrow)."""

    def __init__(self, head_dim: int, theta: float, device, dtype):
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
        self.dtype = dtype

    def __call__(self, positions: torch.Tensor):
        freqs = positions.float().unsqueeze(-1) * self.inv_freq  # [T, d/2]
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(self.dtype).unsqueeze(0), angles.sin().to(self.dtype).unsqueeze(0)


def rope_theta(config) -> float:
    parameters = getattr(config, "rope_parameters", None) or {}
    return float(parameters.get("rope_theta") or getattr(config, "rope_theta", None) or 10000.0)


class TargetParts:
    """The target's token embedding, rotary embedding and output layer, shared (never copied) by a drafter."""

    def __init__(self, model: nn.Module, head_dim: int):
        self.model = model
        self.embed = model.get_input_embeddings()
        self.output = model.get_output_embeddings()
        weight = self.output.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.vocab_size, self.hidden_size = weight.shape
        rotary = getattr(model.get_decoder(), "rotary_emb", None)
        config = configs.text_config(model.config)
        target_head_dim = configs.head_dim(config)
        if rotary is not None and target_head_dim == head_dim:
            self._rotary = rotary  # the target's own (keeps its rope scaling, if any)
        else:
            self._rotary = DefaultRotary(head_dim, rope_theta(config), self.device, self.dtype)

    def rotary(self, positions: torch.Tensor):
        """positions [T] -> cos, sin [1, T, d]."""
        if isinstance(self._rotary, DefaultRotary):
            return self._rotary(positions)
        probe = torch.empty(0, device=self.device, dtype=self.dtype)
        return self._rotary(probe, positions.unsqueeze(0))


TOP_K_CHUNK = 1024  # on a GPU, a long row's top k is taken in chunks of this many, then among the chunks' bests


def top_k(x: torch.Tensor, k: int, two_stage: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x.topk(k, dim=-1) (values, indices), best first. On a GPU (two_stage=None), rows longer than a chunk go in
    two stages: the k best of each TOP_K_CHUNK-long chunk, then the k best of those. Why: torch.topk gives
    each row one block, slow over a long row (a draft tree takes one a depth; docs/fast-path.md)."""
    length = x.shape[-1]
    two_stage = x.is_cuda if two_stage is None else two_stage
    if not two_stage or length <= TOP_K_CHUNK or length % TOP_K_CHUNK or k > TOP_K_CHUNK:
        return x.topk(k, dim=-1)
    chunks = x.reshape(*x.shape[:-1], length // TOP_K_CHUNK, TOP_K_CHUNK)
    values, indices = chunks.topk(k, dim=-1)  # [..., chunks, k]
    offsets = torch.arange(0, length, TOP_K_CHUNK, device=x.device)[:, None]
    values, indices = values.flatten(-2), (indices + offsets).flatten(-2)
    best, at = values.topk(k, dim=-1)
    return best, indices.gather(-1, at)


class DraftHead:
    """Logits over the full vocabulary from draft features, scoring only `token_ids` (None = all tokens).
    weight [V, H] whose rows `token_ids` are kept (the target's output layer, or a head's own), or with
    `selected` [K, H] already one row a token of token_ids (EAGLE-3's own output layer over its draft
    vocabulary). norm: applied to the features first (EAGLE-3's final norm), or None."""

    def __init__(self, weight: torch.Tensor, vocab_size: int, token_ids: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, onednn: bool = True, norm=None, selected: bool = False):
        self.token_ids = token_ids
        self.vocab_size = vocab_size
        self.norm = norm
        if token_ids is not None and not selected:
            weight = weight[token_ids]
            bias = bias[token_ids] if bias is not None else None
        self.weight = weight.detach()
        self.bias = bias.detach() if bias is not None else None
        # on a CPU in float32, prepacked for oneDNN like the target's matrices (specviz.runners.onednn): a draft head
        # is most of a small drafter's cost there
        packable = onednn and onednn_allowed(self.weight.device, self.weight.dtype,
                                             self.weight.numel() * self.weight.element_size())
        self.packed = pack_matrix(self.weight) if packable else None

    @property
    def scored(self) -> int:
        """How many tokens the head scores (its draft vocabulary's size)."""
        return int(self.weight.shape[0])

    @classmethod
    def from_target(cls, parts: TargetParts, token_ids: torch.Tensor | None, onednn: bool = True) -> "DraftHead":
        ids = token_ids.to(parts.device) if token_ids is not None else None
        return cls(parts.output.weight, parts.vocab_size, ids, getattr(parts.output, "bias", None), onednn)

    def sub_logits(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., H] -> [..., K] float32."""
        if self.norm is not None:
            features = self.norm(features)
        if self.packed is None:
            return torch.nn.functional.linear(features, self.weight, self.bias).float()
        return onednn_linear(features, self.packed, self.bias).float()

    def top_tokens(self, features: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """features [..., H] -> the k likeliest tokens (ids in the full vocabulary; fewer when fewer are scored)
        and their log probabilities, [..., k] each, best first; computed over the scored tokens only (the
        others have probability 0), without building full-vocabulary rows."""
        logits = self.sub_logits(features)
        values, indices = top_k(logits, min(k, logits.shape[-1]))  # never more than it scores
        ids = indices if self.token_ids is None else self.token_ids[indices]
        return ids, values - torch.logsumexp(logits, -1, keepdim=True)

    def full_logits(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., H] -> [..., V] float32, -inf for tokens the head does not score."""
        sub = self.sub_logits(features)
        if self.token_ids is None:
            return sub
        full = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.token_ids] = sub
        return full
