"""Logits to probabilities (temperature, top-k, top-p) and seeded draws. Target and drafter go through the
same function, so p and q are always the distributions after the same warping."""
from __future__ import annotations

import torch

from .settings import DecodeSettings


def warp_probs(logits: torch.Tensor, settings: DecodeSettings) -> torch.Tensor:
    """logits [..., V] -> probs [..., V] (float32). Greedy (temperature 0) gives a one-hot argmax."""
    logits = logits.float()
    if settings.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / settings.temperature
    if 0 < settings.top_k < logits.shape[-1]:
        kth = torch.topk(logits, settings.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if settings.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # drop a token when the tokens before it already reach top_p; the most probable token always stays
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= settings.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def display_probs(logits: torch.Tensor, settings: DecodeSettings) -> torch.Tensor:
    """The distribution shown to the user: the warped one when sampling, the plain softmax for greedy
    (a one-hot would show nothing)."""
    if settings.greedy:
        return logits.float().softmax(-1)
    return warp_probs(logits, settings)


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator:
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of probs [..., V] -> ids [...]."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
