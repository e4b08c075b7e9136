"""`ngram`: prompt lookup decoding (Saxena, 2023). Find the most recent earlier occurrence of the last n
tokens in the context and propose the tokens that followed it. No model, no distribution (one-hot q)."""
from __future__ import annotations

import torch

from ..rule.tree import weighted_trie
from .base import Draft, Feedback, Proposer, ProposerRequest
from .ngram_device import NgramLookup


def lookup_continuation(tokens: torch.Tensor, gamma: int, max_ngram: int, min_ngram: int) -> torch.Tensor:
    """tokens [T] -> up to gamma tokens that followed the latest earlier match of the longest suffix n-gram
    (n from max_ngram down to min_ngram); empty when nothing matches. The reference for NgramIndex."""
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


class NgramIndex:
    """lookup_continuation in O(1) a step: for each n, a dict from every n-gram that has a token after it to
    the positions after its occurrences (latest last), updated as the sequence grows (host lists, no tensor
    ops)."""

    def __init__(self, max_ngram: int, min_ngram: int):
        self.sizes = range(max_ngram, min_ngram - 1, -1)
        self.tokens: list[int] = []
        self.ends: dict[int, dict[tuple, list[int]]] = {n: {} for n in self.sizes}

    def extend(self, ids: list[int]) -> None:
        tokens = self.tokens
        first_new_end = max(0, len(tokens) - 1)  # n-grams ending at len - 1 now get a following token
        tokens.extend(ids)
        for end in range(first_new_end, len(tokens) - 1):  # end: index of the n-gram's last token
            for n in self.sizes:
                if end + 1 >= n:
                    self.ends[n].setdefault(tuple(tokens[end + 1 - n:end + 1]), []).append(end + 1)

    def continuation(self, gamma: int) -> tuple[list[int], int]:
        """(the tokens, the size n of the matched n-gram); ([], 0) when nothing matches."""
        tokens, length = self.tokens, len(self.tokens)
        for n in self.sizes:
            if length <= n:
                continue
            starts = self.ends[n].get(tuple(tokens[length - n:]))
            if starts:
                return tokens[starts[-1]:starts[-1] + gamma], n
        return [], 0

    def candidates(self, gamma: int, per_size: int = 8) -> list[tuple[list[int], float]]:
        """Continuations of up to `per_size` latest occurrences of each suffix n-gram, each weighted 4^(n-1):
        one match of a longer n-gram outweighs several of a shorter (for a draft tree: tree.weighted_trie)."""
        tokens, length, out = self.tokens, len(self.tokens), []
        for n in self.sizes:
            if length <= n:
                continue
            for start in reversed(self.ends[n].get(tuple(tokens[length - n:]), [])[-per_size:]):
                out.append((tokens[start:start + gamma], 4.0 ** (n - 1)))
        return out


class NgramProposer(Proposer):
    name = "ngram"
    drafts_on_host = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.index: NgramIndex | None = None  # the sequence's host mirror, built by the first propose()

    def reset(self, prompt_ids, settings, generator, target_hidden=None) -> None:
        super().reset(prompt_ids, settings, generator)
        self.index = None  # built from the prompt by the first propose()

    def _synced_index(self, tokens: torch.Tensor) -> NgramIndex:
        """The host mirror, brought up to `tokens` when a caller skipped reset() or observe()."""
        index = self.index
        have = len(index.tokens) if index is not None else 0
        if index is None or have > tokens.shape[0] or (have and int(tokens[have - 1]) != index.tokens[-1]):
            index, have = NgramIndex(self.max_ngram, self.min_ngram), 0
        if have < tokens.shape[0]:
            index.extend(tokens[have:].tolist())
        self.index = index
        return index

    def _index_for(self, tokens: torch.Tensor) -> NgramIndex:
        """The host mirror of `tokens`: kept up to date by observe(), rebuilt only when a caller skipped it."""
        index = self.index
        return index if index is not None and len(index.tokens) == tokens.shape[0] else self._synced_index(tokens)

    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        index = self._index_for(tokens)
        budget = self.tree_budget()
        if budget:  # a tree of the continuations of several earlier matches
            node_ids, parents = weighted_trie(index.candidates(gamma), budget)
            return Draft(torch.tensor(node_ids, dtype=torch.long), probs=None, parents=parents)
        continuation, size = index.continuation(gamma)
        return Draft(torch.tensor(continuation, dtype=torch.long), probs=None, key=size)

    def device_lookup(self, settings, runner):
        return NgramLookup(settings.gamma, settings.tree, self.sizes(), runner.use_graphs and runner.use_compile)

    def sizes(self) -> tuple[int, ...]:
        """The n-gram sizes looked up, longest first."""
        return tuple(range(self.max_ngram, self.min_ngram - 1, -1))

    def observe(self, feedback: Feedback) -> None:
        index = self.index
        if index is None:
            return  # propose() builds it
        if feedback.new_ids is not None and len(index.tokens) + len(feedback.new_ids) == feedback.tokens.shape[0]:
            index.extend(feedback.new_ids)
        else:
            self._synced_index(feedback.tokens)


def build(request: ProposerRequest) -> NgramProposer:
    """`ngram`'s proposer (specviz.methods): it looks up the sequence itself, nothing to load."""
    return NgramProposer()
