"""Split text on ASCII whitespace and number its distinct words by first appearance, in numpy.

``split_ids(text)`` equals ``first_appearance_ids(text.split())`` (the reference definition,
one dict lookup per token, kept as the fallback) but costs a few array passes and one sort:

1. word boundaries from a whitespace table over the bytes;
2. an exact key per word: its length and first 16 bytes, zero-padded; longer words get a serial
   number from a small dict instead;
3. a 64-bit mix of the key, whose top bits sorted together with the word's position group equal
   words, each group starting at its first appearance;
4. a check that every group holds one key (a hash collision falls back to the dict: exact).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

SPACE = np.zeros(256, bool)
SPACE[list(b" \t\n\r\x0b\x0c")] = True  # what bytes.split() splits on
POS_BITS = 23  # positions below 2**23 share a sort key with 41 bits of hash
LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)
BUILD_AT = 4096  # shorter queries use the dict, sparing txl-generate a table of the vocabulary
LONG = np.uint64(2**64 - 1)  # second key half of words over 16 bytes (no UTF-8 has 0xff bytes)


def first_appearance_ids(words: list[bytes]) -> tuple[list[bytes], np.ndarray]:
    """Distinct words in order of first appearance, and each word's index among them."""
    index: defaultdict[bytes, int] = defaultdict()
    index.default_factory = index.__len__  # a new word gets the next id, at C speed
    ids = np.fromiter(map(index.__getitem__, words), dtype=np.int32, count=len(words))
    return list(index), ids


def split_ids(text: bytes) -> tuple[list[bytes], np.ndarray]:
    """``first_appearance_ids(text.split())``, vectorized."""
    a = np.frombuffer(text, np.uint8)
    edges = np.flatnonzero(np.diff(SPACE[a], prepend=True, append=True))
    starts, ends = edges[0::2], edges[1::2]
    if not 0 < len(starts) < 1 << POS_BITS:
        return first_appearance_ids(text.split())
    k0, k1 = word_keys(text, a, starts, ends)
    lengths = (ends - starts).astype(np.uint64)  # with the padded bytes, exact even with NULs
    n = len(starts)
    mixed = mix(k0, k1 ^ lengths)
    low = np.uint64((1 << POS_BITS) - 1)
    keyed = np.sort(mixed & ~low | np.arange(n, dtype=np.uint64))  # hash's top bits, position
    pos = (keyed & low).astype(np.int64)
    new = np.empty(n, bool)
    new[0] = True
    np.not_equal(keyed[1:] & ~low, keyed[:-1] & ~low, out=new[1:])
    s0, s1, sl = k0[pos], k1[pos], lengths[pos]
    differ = (s0[1:] != s0[:-1]) | (s1[1:] != s1[:-1]) | (sl[1:] != sl[:-1])
    if differ[~new[1:]].any():  # a hash collision
        return first_appearance_ids(text.split())
    group = np.cumsum(new) - 1
    first = pos[new]  # sorted by hash; each group's first position
    by_first = np.sort(first << POS_BITS | np.arange(len(first)))
    order = by_first & ((1 << POS_BITS) - 1)
    rank = np.empty(len(first), np.int32)
    rank[order] = np.arange(len(first), dtype=np.int32)
    ids = np.empty(n, np.int32)
    ids[pos] = rank[group]
    firsts = by_first >> POS_BITS
    return gather_words(a, starts[firsts], ends[firsts]), ids


def word_keys(
    text: bytes, a: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Exact (first 8 bytes, next 8 bytes) keys of words; serial numbers for longer words."""
    lengths = ends - starts
    padded = np.concatenate([a, np.zeros(16, np.uint8)])
    at = np.ndarray((len(a) + 8,), "<u8", padded.data, strides=(1,))  # 8 bytes from any offset
    k0 = at[starts] & LOW_BYTES[np.minimum(lengths, 8)]
    k1 = at[starts + 8] & LOW_BYTES[np.clip(lengths - 8, 0, 8)]
    long = np.flatnonzero(lengths > 16)
    if len(long):
        serial: dict[bytes, int] = {}
        bounds = zip(starts[long].tolist(), ends[long].tolist())
        k0[long] = [serial.setdefault(text[s:e], len(serial)) for s, e in bounds]
        k1[long] = LONG
    return k0, k1


def gather_words(a: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    """The words at [starts, ends) of ``a`` as bytes objects (one copy, one C-speed split)."""
    lengths = ends - starts + 1  # each word and a space after it
    out_ends = np.cumsum(lengths)
    src = np.repeat(starts - (out_ends - lengths), lengths) + np.arange(int(out_ends[-1]))
    buf = a[np.minimum(src, len(a) - 1)]
    buf[out_ends - 1] = ord(" ")
    return buf.tobytes().split()


def mix(k0: np.ndarray, k1: np.ndarray) -> np.ndarray:
    """A 64-bit hash of 128-bit keys (multiply-xorshift; equal keys give equal hashes)."""
    mixed = (k0 * np.uint64(0x9E3779B97F4A7C15)) ^ (k1 * np.uint64(0xC2B2AE3D27D4EB4F))
    mixed ^= mixed >> np.uint64(29)
    mixed *= np.uint64(0xBF58476D1CE4E5B9)
    return mixed


def keys_of(words: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(k0, k1, longer than 16 bytes) of words, or None if a word is empty or holds whitespace
    or NUL (then only a dict is exact)."""
    text = " ".join(words).encode("utf-8")
    a = np.frombuffer(text, np.uint8)
    edges = np.flatnonzero(np.diff(SPACE[a], prepend=True, append=True))
    starts, ends = edges[0::2], edges[1::2]
    if len(starts) != len(words) or b"\0" in text:
        return None
    k0, k1 = word_keys(text, a, starts, ends)
    return k0, k1, ends - starts > 16


class WordTable:
    """A vectorized ``dict.get`` over a fixed word list: exact keys found by sorted hashes."""

    def __init__(self, index: dict[str, int]):
        self.index = index
        self.built = False
        self.hashes: np.ndarray | None = None  # sorted; None: look words up in the dict

    def build(self) -> None:
        """Hash the words (about 1 s per 1M words; get() does it for long queries)."""
        self.built = True
        keys = keys_of(list(self.index))
        if keys is None:
            return
        k0, k1, long = keys
        short = np.flatnonzero(~long)
        hashes = mix(k0[short], k1[short])
        order = np.argsort(hashes)
        self.ids = short[order].astype(np.int32)
        self.k0, self.k1 = k0[short][order], k1[short][order]
        hashes = hashes[order]
        if len(hashes) and not (hashes[1:] == hashes[:-1]).any():  # else two words share one
            self.hashes = hashes

    def get(self, words: Sequence[str], default: int) -> np.ndarray:
        """int32 id of each word, ``default`` where the word is not in the table."""
        if not self.built and len(words) >= BUILD_AT:
            self.build()
        keys = keys_of(words) if self.hashes is not None else None
        if keys is None:
            get = self.index.get
            return np.fromiter((get(w, default) for w in words), np.int32, len(words))
        k0, k1, long = keys
        hashes = mix(k0, k1)
        by_hash = np.argsort(hashes)  # sorted queries walk the table in order: cache friendly
        i = np.empty(len(words), np.int64)
        i[by_hash] = np.searchsorted(self.hashes, hashes[by_hash])
        i = np.minimum(i, len(self.hashes) - 1)
        hit = (self.hashes[i] == hashes) & (self.k0[i] == k0) & (self.k1[i] == k1) & ~long
        ids = np.where(hit, self.ids[i], np.int32(default)).astype(np.int32)
        for j in np.flatnonzero(long).tolist():
            ids[j] = self.index.get(words[j], default)
        return ids


# Lead bytes of the whitespace str.split() knows and bytes.split() does not (corpora.EXOTIC_SPACE).
EXOTIC_LEAD = np.zeros(256, bool)
EXOTIC_LEAD[[0x1C, 0x1D, 0x1E, 0x1F, 0xC2, 0xE1, 0xE2, 0xE3]] = True


def has_exotic_space(data: bytes) -> bool:
    """``corpora.EXOTIC_SPACE.search(data)`` as array tests on the few candidate lead bytes."""
    a = np.frombuffer(data + b"\0\0", np.uint8)
    lead = np.flatnonzero(EXOTIC_LEAD[a[:-2]])
    b0, b1, b2 = a[lead], a[lead + 1], a[lead + 2]
    e2_80_third = ((b2 >= 0x80) & (b2 <= 0x8A)) | np.isin(b2, (0xA8, 0xA9, 0xAF))
    e2_80 = (b0 == 0xE2) & (b1 == 0x80) & e2_80_third
    return bool(
        (
            (b0 < 0x20)
            | ((b0 == 0xC2) & ((b1 == 0x85) | (b1 == 0xA0)))
            | ((b0 == 0xE1) & (b1 == 0x9A) & (b2 == 0x80))
            | e2_80
            | ((b0 == 0xE2) & (b1 == 0x81) & (b2 == 0x9F))
            | ((b0 == 0xE3) & (b1 == 0x80) & (b2 == 0x80))
        ).any()
    )
