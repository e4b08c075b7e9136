"""`ngram`: prompt lookup decoding (Saxena, 2023). Find the most recent earlier occurrence of the last n
tokens in the context and propose the tokens that followed it. No model, no distribution (one-hot q)."""
from __future__ import annotations

import torch

from .base import Draft, Proposer


def lookup_continuation(tokens: torch.Tensor, gamma: int, max_ngram: int, min_ngram: int) -> torch.Tensor:
    """tokens [T] -> up to gamma tokens that followed the latest earlier match of the longest suffix n-gram
    (n from max_ngram down to min_ngram); empty when nothing matches."""
    length = tokens.shape[0]
    for n in range(max_ngram, min_ngram - 1, -1):
        if length <= n:
            continue
        suffix = tokens[-n:]
        windows = tokens[:-1].unfold(0, n, 1)  # every window here has at least one token after it
        hits = (windows == suffix).all(dim=1).nonzero()
        if hits.numel():
            start = int(hits[-1]) + n
            return tokens[start:start + gamma]
    return tokens[:0]


class NgramProposer(Proposer):
    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        return Draft(lookup_continuation(tokens, gamma, self.max_ngram, self.min_ngram), probs=None)
