"""Retrieval drafting: the datastore's index against a brute-force search, the heaviest line against the
weighted trie, files that refuse another vocabulary, and exact greedy output on a tiny model."""
import random

import numpy as np
import pytest

from specviz import DecodeSettings, DrafterMismatchError, ModelLoadError
from specviz.api import make_proposer, run_once
from specviz.proposers.datastore import Datastore, key_width, pack_keys, prefix_range
from specviz.proposers import PlainProposer, RetrievalProposer
from specviz.proposers.ngram import NgramIndex
from specviz.rule.tree import first_child_chain, weighted_trie


def brute_occurrences(texts: list[list[int]], ngram: list[int]) -> list[list[int]]:
    """Every (text, end of the match) where ngram occurs, as the tokens that follow it in that text."""
    out = []
    for text in texts:
        for start in range(len(text) - len(ngram) + 1):
            if text[start:start + len(ngram)] == ngram:
                out.append(text[start + len(ngram):])
    return out


@pytest.mark.parametrize("vocab", [5, 40, 70000])
def test_occurrences_equal_a_brute_force_search(vocab):
    rng = random.Random(vocab)
    texts = [[rng.randrange(min(vocab, 6)) for _ in range(rng.randrange(0, 30))] for _ in range(40)]
    store = Datastore.from_texts(texts, vocab)
    assert store.width == key_width(vocab) == (3 if vocab > 65535 else 4)
    for _ in range(200):
        ngram = [rng.randrange(min(vocab, 6)) for _ in range(rng.randrange(1, store.width + 1))]
        found = sorted(store.tokens[start:start + 3].tolist() for start in store.occurrences(ngram))
        expected = brute_occurrences(texts, ngram)
        # the datastore's view of what follows runs on into the separator and the next text: compare the
        # count, and what follows up to the end of each text
        assert len(found) == len(expected)
        pieces, n = store.continuations(ngram, 3, limit=10_000)
        if expected:
            assert n == len(ngram)
            assert sorted(pieces) == sorted(e[:3] for e in expected if e)  # cut at the end of the text


def test_continuations_back_off_to_shorter_suffixes_and_spread_the_limit():
    texts = [[1, 2, 3, 4, 5], [9, 3, 7, 7], [3, 8]] + [[3, 6]] * 50
    store = Datastore.from_texts(texts, 10)
    pieces, n = store.continuations([0, 0, 2, 3], 2)  # "0 0 2 3", "0 2 3" never occur; "2 3" does
    assert (pieces, n) == ([[4, 5]], 2)
    pieces, n = store.continuations([5, 5, 5, 3], 2, limit=8)  # "3": 53 occurrences, 8 taken evenly
    assert n == 1 and len(pieces) == 8
    assert pieces.count([6]) >= 6 and [4, 5] in pieces  # the common continuation comes up as often as it occurs
    assert store.continuations([0], 3) == ([], 0)  # never seen


def test_keys_pack_the_tokens_before_each_position_nearest_first():
    tokens = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.uint16)
    keys = pack_keys(tokens, 4, 4, 15)
    assert int(keys[4]) == (1 << 12) | (4 << 8) | (1 << 4) | 3  # before position 4: 1, 4, 1, 3
    assert int(keys[1]) == (3 << 12) | (15 << 8) | (15 << 4) | 15  # before the start: separators
    low, high = prefix_range([1, 4], 4, 4)  # positions that follow "4 1"
    assert [p for p in range(len(tokens)) if low <= int(keys[p]) <= high] == [4]


def test_heaviest_line_is_the_weighted_tries_first_child_line():
    rng = random.Random(0)
    for _ in range(200):
        candidates = [([rng.randrange(4) for _ in range(rng.randrange(1, 7))], rng.random())
                      for _ in range(rng.randrange(1, 12))]
        tokens, parents = weighted_trie(candidates, 10_000)
        expected = [tokens[node] for node in first_child_chain(parents, -1)]
        from specviz.proposers.retrieval import heaviest_line
        assert heaviest_line(candidates, 6) == expected


def test_the_sequence_outweighs_the_datastore():
    store = Datastore.from_texts([[1, 2, 7, 7]] * 20, 10)
    proposer = RetrievalProposer(store)
    index = NgramIndex(3, 1)
    index.extend([1, 2, 5, 5, 0, 1, 2])  # the sequence itself says "1 2" -> "5 5"; the datastore, 20 times "7 7"
    candidates = proposer.candidates(index, 2)
    from specviz.proposers.retrieval import heaviest_line
    assert heaviest_line(candidates, 2) == [5, 5]
    assert proposer.draft_key == (True, 2)
    index = NgramIndex(3, 1)
    index.extend([0, 1, 2])  # no earlier "1 2" in the sequence: the datastore's guess
    assert heaviest_line(proposer.candidates(index, 2), 2) == [7, 7]


def test_files_round_trip_and_refuse_another_vocabulary(tmp_path):
    store = Datastore.from_texts([[1, 2, 3], [4, 5]], 32, {"note": "test"})
    store.save(tmp_path / "store")
    again = Datastore.load(tmp_path / "store", 32)
    assert again.tokens.tolist() == store.tokens.tolist() and again.meta == {"note": "test"}
    with pytest.raises(DrafterMismatchError, match="vocabulary of 32 tokens"):
        Datastore.load(tmp_path / "store", 50)
    with pytest.raises(ModelLoadError, match="train-drafter --method retrieval"):
        Datastore.load(tmp_path, 32)
    (tmp_path / "store" / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        Datastore.load(tmp_path / "store", 32)


@pytest.mark.parametrize("tree", [0, 12])
def test_greedy_retrieval_equals_plain_greedy(tiny_target, tmp_path, tree):
    """A datastore of the tiny target's own greedy answers to other prompts, as `specviz train-drafter --method
    retrieval` writes one: exact output, and the drafts really get accepted."""
    settings = DecodeSettings(max_new_tokens=40, gamma=4, tree=tree)
    answers = [run_once(tiny_target, PlainProposer(), [p, (p * 7) % 32], settings).token_ids for p in range(12)]
    Datastore.from_texts(answers, tiny_target.vocab_size).save(tmp_path / "store")
    proposer = make_proposer("retrieval", tiny_target, heads=str(tmp_path / "store"))
    for prompt in ([5, 3], [11, 13, 2]):
        plain = run_once(tiny_target, PlainProposer(), prompt, settings)
        result = run_once(tiny_target, proposer, prompt, settings)
        assert result.token_ids == plain.token_ids
        assert result.metrics.accepted > 0 and result.metrics.drafted > result.metrics.accepted
