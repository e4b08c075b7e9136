"""Logits to probabilities (temperature, top-k, top-p) and seeded draws. Target and drafter go through the
same function, so p and q are always the distributions after the same warping."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..settings import DecodeSettings


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


# On the device (the device loop, device_loop.py): the same warping with its settings held in tensors, so that one
# captured graph serves every temperature, top-k and top-p, and draws that read nothing back to the host.

@dataclass
class DeviceWarp:
    """A run's temperature, top-k and top-p as 0-d tensors on the device (set per run, read by captured graphs).
    filtered: whether top-k or top-p may apply (a graph without their sort serves plain temperature)."""
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    filtered: bool

    @classmethod
    def make(cls, device, filtered: bool) -> "DeviceWarp":
        return cls(torch.ones((), device=device), torch.zeros((), dtype=torch.long, device=device),
                   torch.ones((), device=device), filtered)

    def set(self, settings: DecodeSettings) -> None:
        """The run's values (a copy each, queued on the device: no wait)."""
        self.temperature.fill_(settings.temperature)
        self.top_k.fill_(settings.top_k)
        self.top_p.fill_(settings.top_p)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return warp_with(logits, self.temperature, self.top_k, self.top_p, self.filtered)


def warp_with(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
              filtered: bool) -> torch.Tensor:
    """warp_probs (temperature above 0) with the settings as tensors: logits [..., V] -> probs [..., V] float32.
    The same operations in the same order, so the same distribution; top_k 0 and top_p 1 filter nothing."""
    logits = logits.float() / temperature
    if not filtered:
        return logits.softmax(-1)
    vocab = logits.shape[-1]
    ordered = logits.sort(dim=-1, descending=True).values
    k = torch.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    kth = ordered.gather(-1, (k - 1).expand(*ordered.shape[:-1], 1))
    logits = logits.masked_fill(logits < kth, float("-inf"))
    # top-p over what top-k kept, sorted as warp_probs sorts it
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    sorted_probs = sorted_logits.softmax(-1)
    drop_sorted = (mass_before(sorted_probs) >= top_p) & (top_p < 1.0)
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf")).softmax(-1)


@torch.compiler.disable
def mass_before(sorted_probs: torch.Tensor) -> torch.Tensor:
    """The probability mass before each entry of rows sorted in descending order. Kept out of torch.compile:
    Inductor can fail to generate code for the split scan it chooses over a row as long as a vocabulary, and the
    run would then fall back to the host loop; eagerly it is one kernel, captured in the step's graph all the same."""
    return sorted_probs.cumsum(-1) - sorted_probs


def exponential_noise(shape, generator: torch.Generator, device) -> torch.Tensor:
    """Exp(1) draws for draw_with_noise (nothing read back: a graph can hold it, the run's generator seeds it)."""
    return torch.empty(shape, device=device).exponential_(generator=generator)


def draw_with_noise(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """One token per row of probs [..., V], given Exp(1) noise of the same shape: argmax p_i / E_i is token i
    with probability p_i (the exponential race; gpt-fast's and vLLM's sampling without a host sync)."""
    return (probs / noise.clamp_min(1e-30)).argmax(-1)


def drafter_pick(scores: torch.Tensor, token_ids: torch.Tensor | None, vocab_size: int, warp=None, noise=None,
                 shown: bool = False):
    """A drafter's token from its scores [R, K] over what it may draft (token_ids [K], its draft vocabulary's
    ids in the target's; None: the target's first K ids), on the device. Greedy (warp None): the argmax; sampled
    (warp: warp_with's settings after the logits; noise [R, K] Exp(1)): a draw from the warped scores. Returns
    (the target's ids [R], q [R, vocab_size]: what was drawn from (greedy with shown: the softmax, what the app
    shows of the drafter; else None), the index into the K scores [R])."""
    if warp is None:
        index = scores.argmax(-1)
        probs = scores.softmax(-1) if shown else None
    else:
        probs = warp_with(scores, *warp)
        index = draw_with_noise(probs, noise)
    q = None
    if probs is not None:
        columns = token_ids if token_ids is not None else torch.arange(probs.shape[-1], device=probs.device)
        q = probs.new_zeros(probs.shape[0], vocab_size).index_copy_(1, columns, probs)
    return (index if token_ids is None else token_ids.index_select(0, index)), q, index
