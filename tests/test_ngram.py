"""n-gram lookup (proposers/ngram.py): NgramIndex finds what the reference lookup finds, and its candidates
come from every earlier match."""
import random

import torch

from specviz.proposers.ngram import NgramIndex, lookup_continuation


def test_ngram_index_finds_what_the_reference_lookup_finds():
    rng = random.Random(0)
    for trial in range(300):
        vocab = rng.choice([2, 3, 5, 20])
        tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))]
        max_n = rng.choice([1, 2, 3, 4])
        min_n = rng.randint(1, max_n)
        index = NgramIndex(max_n, min_n)
        cut = rng.randrange(len(tokens) + 1)  # built in two pieces, as a run extends it
        index.extend(tokens[:cut])
        index.extend(tokens[cut:])
        for gamma in (1, 4, 9):
            expected = lookup_continuation(torch.tensor(tokens), gamma, max_n, min_n).tolist()
            assert index.continuation(gamma)[0] == expected, (tokens, max_n, min_n, gamma)


def test_ngram_index_candidates_come_from_every_earlier_match():
    index = NgramIndex(2, 1)
    index.extend([5, 1, 2, 9, 1, 2, 8, 3, 2, 7, 1, 2])
    candidates = index.candidates(gamma=2)
    # suffix 2-gram (1, 2): followed by 9 1 and 8 3 (latest first), weight 4; 1-gram (2): also 7 1, weight 1
    assert candidates[:2] == [([8, 3], 4.0), ([9, 1], 4.0)]
    assert ([7, 1], 1.0) in candidates[2:]
