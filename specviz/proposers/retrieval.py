"""`retrieval`: n-gram lookup in the sequence (as `ngram`) and in a datastore of texts the target wrote itself
(REST, He et al. 2024). No model, no distribution (one-hot q): a draft costs a few dictionary and binary-search
lookups on the host.

Both sources give candidate continuations with weights; they are merged into a weighted trie (tree.py), so
that a continuation that several earlier occurrences agree on weighs more. A chain is the trie's heaviest line;
a draft tree keeps its heaviest nodes. Matches in the sequence itself weigh far more than the datastore's:
a text copied from the prompt is a better guess than what the target usually writes.
"""
from __future__ import annotations

import torch

from .datastore import Datastore
from ..rule.tree import heaviest_line, weighted_trie
from .base import Draft, ProposerRequest
from .checkpoints import load_drafter
from .ngram import NgramProposer
from .ngram_device import SEQUENCE_WEIGHT
from .retrieval_device import RetrievalLookup, device_datastore

STORE_WEIGHT = 0.01  # a datastore continuation against one of the sequence's own (chosen on self-written data)
STORE_LIMIT = 32  # datastore continuations a step looks at


class RetrievalProposer(NgramProposer):
    name = "retrieval"
    draft_key: tuple | None = None  # the key of the candidates looked up last

    def __init__(self, datastore: Datastore, max_ngram: int = 3, min_ngram: int = 1,
                 store_weight: float = STORE_WEIGHT, store_limit: int = STORE_LIMIT):
        super().__init__(max_ngram, min_ngram)
        self.datastore = datastore
        self.store_weight = store_weight
        self.store_limit = store_limit

    def candidates(self, index, gamma: int) -> list[tuple[list[int], float]]:
        """The sequence's own continuations (NgramIndex.candidates), then the datastore's, each weighted
        store_weight * 4^(n - 1) for a match of n tokens. Sets draft_key, the key of the drafts made of them
        (Draft.key): whether the sequence itself matched, and the length of the datastore's match."""
        found = [(piece, SEQUENCE_WEIGHT * weight) for piece, weight in index.candidates(gamma)]
        pieces, n = self.datastore.continuations(index.tokens[-self.datastore.width:], gamma, self.store_limit)
        self.draft_key = (bool(found), n)
        weight = SEQUENCE_WEIGHT * self.store_weight * 4.0 ** (n - 1)
        return found + [(piece, weight) for piece in pieces]

    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        candidates = self.candidates(self._index_for(tokens), gamma)
        budget = self.tree_budget()
        if budget:
            node_ids, parents = weighted_trie(candidates, budget)
            return Draft(torch.tensor(node_ids, dtype=torch.long), probs=None, parents=parents, key=self.draft_key)
        return Draft(torch.tensor(heaviest_line(candidates, gamma), dtype=torch.long), probs=None, key=self.draft_key)

    def device_lookup(self, settings, runner):
        return RetrievalLookup(settings.gamma, settings.tree, self.sizes(),
                               device_datastore(self.datastore, runner.device),
                               self.store_limit, self.store_weight * SEQUENCE_WEIGHT,
                               compiled=runner.use_graphs and runner.use_compile, streams=runner.use_graphs)


def build(request: ProposerRequest) -> RetrievalProposer:
    """`retrieval`'s proposer (specviz.methods): the datastore of --heads, or the one shipped for the target."""
    return RetrievalProposer(load_drafter("retrieval", request.target, request.heads))
