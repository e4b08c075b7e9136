"""A datastore for retrieval drafting (REST, He et al. 2024): texts the target wrote itself, indexed so that
the last few tokens of the sequence find every place where they occur, and the tokens that followed there.

The texts are concatenated with a separator between them. The index sorts every position by the (up to) four
tokens before it, the nearest first, packed into one unsigned 64-bit key. The positions that follow the last n
tokens of the sequence are then one contiguous range of the sorted keys, and the range for n + 1 tokens lies
inside the range for n: a lookup starts from a table of each token's range and narrows it one token at a
time, each binary search inside the last range (this runs on the host every step, where the 47 MB of keys are
mostly out of the CPU's caches: the fewer places a lookup reads, the faster).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import DrafterMismatchError, ModelLoadError

PAD = 128  # the longest continuation read (the separators after the last text make room for it)


def token_bits(vocab_size: int) -> int:
    """Bits that one token id (or the separator, = vocab_size) takes in a key."""
    return max(1, int(vocab_size).bit_length())


def key_width(vocab_size: int) -> int:
    """How many tokens fit in one 64-bit key (4 for vocabularies of up to 65,535 tokens)."""
    return min(4, 64 // token_bits(vocab_size))


def pack_keys(tokens: np.ndarray, width: int, bits: int, separator: int) -> np.ndarray:
    """keys[p] = tokens[p - 1], tokens[p - 2], ..., tokens[p - width] packed high to low (before the start:
    the separator)."""
    count = len(tokens)
    padded = np.concatenate([np.full(width, separator, dtype=np.uint64), tokens.astype(np.uint64)])
    keys = np.zeros(count, dtype=np.uint64)
    for back in range(1, width + 1):
        keys = (keys << np.uint64(bits)) | padded[width - back:width - back + count]
    return keys


def prefix_range(prefix: list[int], width: int, bits: int) -> tuple[int, int]:
    """The [low, high] keys whose first len(prefix) tokens are `prefix`."""
    low = 0
    for token in prefix:
        low = (low << bits) | int(token)
    free = bits * (width - len(prefix))
    return low << free, (low << free) | ((1 << free) - 1)


class Datastore:
    """tokens: every text, each followed by the separator (= vocab_size, never a token id)."""

    def __init__(self, tokens: np.ndarray, vocab_size: int, meta: dict | None = None):
        self.vocab_size = int(vocab_size)
        self.separator = self.vocab_size
        self.size = int(tokens.shape[0])
        # PAD separators after the last text: a continuation read past the end reads them
        self.tokens = np.concatenate([tokens, np.full(PAD, self.separator, dtype=tokens.dtype)])
        self.meta = meta or {}
        self.bits, self.width = token_bits(vocab_size), key_width(vocab_size)
        keys = pack_keys(self.tokens[:self.size], self.width, self.bits, self.separator)
        self.order = np.argsort(keys, kind="stable").astype(np.int64)  # positions, by the tokens before them
        self.keys = keys[self.order]
        # where each token's range begins (the ranges of the last token alone): no search for the first step
        firsts = np.arange(self.vocab_size + 2, dtype=np.uint64) << np.uint64(self.bits * (self.width - 1))
        self.token_starts = np.searchsorted(self.keys, firsts).astype(np.int64)
        self._columns = np.arange(PAD)  # offsets of a continuation's tokens

    @classmethod
    def from_texts(cls, texts: list[list[int]], vocab_size: int, meta: dict | None = None) -> "Datastore":
        dtype = np.uint16 if vocab_size < 2 ** 16 else np.uint32
        parts = []
        for ids in texts:
            if ids:
                parts += [np.asarray(ids, dtype=dtype), np.asarray([vocab_size], dtype=dtype)]
        tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
        return cls(tokens, vocab_size, meta)

    def texts(self) -> list[list[int]]:
        """The texts it holds, in order (the separators dropped)."""
        ends = np.flatnonzero(self.tokens[:self.size] == self.separator)
        starts = np.concatenate([[0], ends[:-1] + 1])
        return [self.tokens[a:b].astype(np.int64).tolist() for a, b in zip(starts, ends) if b > a]

    def _narrow(self, first: int, last: int, before: list[int]) -> tuple[int, int]:
        """The part of [first, last) whose positions follow `before` (nearest token first)."""
        low, high = prefix_range(before, self.width, self.bits)
        bounds = np.searchsorted(self.keys[first:last], np.array([low, high + 1], dtype=np.uint64))
        return first + int(bounds[0]), first + int(bounds[1])

    def _longest_match(self, context: list[int]) -> tuple[int, int, int]:
        """(first, last, n): the index range of the positions that follow the longest suffix of `context` (up to
        `width` tokens) that occurs here, and its length n; n = 0 when not even the last token occurs. The
        ranges of longer suffixes nest inside the last token's range, so one search inside it finds them all."""
        first, last = int(self.token_starts[context[-1]]), int(self.token_starts[context[-1] + 1])
        if first == last:
            return first, last, 0
        longest = min(self.width, len(context))
        if longest == 1:
            return first, last, 1
        bounds = []
        for n in range(2, longest + 1):
            low, high = prefix_range(context[-1:-n - 1:-1], self.width, self.bits)
            bounds += [low, high + 1]
        found = np.searchsorted(self.keys[first:last], np.array(bounds, dtype=np.uint64)).tolist()
        n = 1
        while n < longest and found[2 * n - 2] < found[2 * n - 1]:
            n += 1
        if n > 1:
            first, last = first + found[2 * n - 4], first + found[2 * n - 3]
        return first, last, n

    def occurrences(self, ngram: list[int]) -> np.ndarray:
        """Positions just after every occurrence of `ngram` (1 <= len <= width), in the index's order."""
        first, last = self._narrow(0, self.size, ngram[::-1])
        return self.order[first:last]

    def continuations(self, context: list[int], length: int, limit: int = 32) -> tuple[list[list[int]], int]:
        """What followed the longest suffix of `context` (up to `width` tokens) that occurs here: up to `limit`
        continuations of up to `length` tokens, taken evenly over its occurrences (so that common continuations
        come up as often as they occur), each cut at the end of its text. Returns (continuations, the suffix's
        length); ([], 0) when not even the last token occurs."""
        if not context or not 0 <= context[-1] < self.vocab_size:
            return [], 0
        first, last, n = self._longest_match(context)
        if n == 0:
            return [], 0
        # only the picked entries of the index are read (a common token occurs 100,000s of times), evenly spread
        count = last - first
        if count > limit:
            starts = self.order[first + np.arange(limit) * (count - 1) // max(1, limit - 1)]
        else:
            starts = self.order[first:last]
        # one gather for all of them (few numpy calls: on the host between two forwards each call runs cold)
        rows = self.tokens[starts[:, None] + self._columns[:min(length, PAD)]].tolist()
        out = []
        for row in rows:
            if self.separator in row:  # the end of its text
                row = row[:row.index(self.separator)]
            if row:
                out.append(row)
        return out, n

    # files ---------------------------------------------------------------------------------------------
    def save(self, folder: Path) -> Path:
        """folder/datastore.npz (the tokens) and folder/config.json (vocabulary size, how it was made)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(folder / "datastore.npz", tokens=self.tokens[:self.size])
        config = {"kind": "specviz-datastore", "vocab_size": self.vocab_size, "tokens": self.size, "specviz": self.meta}
        (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        return folder / "datastore.npz"

    @classmethod
    def load(cls, folder: Path, vocab_size: int) -> "Datastore":
        """Refuses a datastore written for another vocabulary: its token ids would mean other words."""
        folder = Path(folder)
        file, config_file = folder / "datastore.npz", folder / "config.json"
        if not file.is_file() or not config_file.is_file():
            raise ModelLoadError(f"{folder} has no datastore.npz and config.json: not a retrieval datastore folder "
                                 "(write one with: python -m specviz train-drafter --method retrieval --out DIR)")
        try:
            config = json.loads(config_file.read_text())
        except json.JSONDecodeError as error:
            raise ModelLoadError(f"{config_file} is not valid JSON: {error.msg}") from None
        if int(config.get("vocab_size", -1)) != int(vocab_size):
            raise DrafterMismatchError(
                f"the datastore in {folder} was written for a vocabulary of {config.get('vocab_size')} tokens, but the "
                f"target has {vocab_size}; use a datastore written by this target (specviz train-drafter --method "
                "retrieval)")
        with np.load(file) as data:
            tokens = data["tokens"]
        if tokens.size and int(tokens.max()) > vocab_size:
            raise DrafterMismatchError(f"the datastore in {folder} holds token ids beyond the target's vocabulary "
                                       f"of {vocab_size}; it was written for another target")
        return cls(tokens, vocab_size, config.get("specviz") or {})
