"""Split text on ASCII whitespace and number its distinct words by first appearance, in numpy.

``split_ids(text)`` equals ``first_appearance_ids(text.split())`` (the reference definition,
one dict lookup per token, kept as the fallback) but costs a few array passes and one sort:

1. word boundaries from a whitespace table over the bytes;
2. an exact key per word: its length and first 16 bytes, zero-padded; longer words get a serial
   number from a small dict instead;
3. a 64-bit mix of the key, whose top bits sorted together with the word's position group equal
   words, each group starting at its first appearance;
4. a check that every group holds one key (a hash collision falls back to the dict: exact).

``WordTable`` maps words to a fixed vocabulary's ids: an open-addressing hash table of the same
exact keys, probed for every token at once. Encoding with a vocabulary (``text_ids``) so needs
neither the sort nor a Python object per word: steps 1 and 2, then one or two array gathers per
token.
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


def word_bounds(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the words of ``a`` (bytes) split on ASCII whitespace."""
    edges = np.flatnonzero(np.diff(SPACE[a], prepend=True, append=True))
    return edges[0::2], edges[1::2]


def split_ids(text: bytes) -> tuple[list[bytes], np.ndarray]:
    """``first_appearance_ids(text.split())``, vectorized."""
    a = np.frombuffer(text, np.uint8)
    starts, ends = word_bounds(a)
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
    starts, ends = word_bounds(a)
    if len(starts) != len(words) or b"\0" in text:
        return None
    k0, k1 = word_keys(text, a, starts, ends)
    return k0, k1, ends - starts > 16


class WordTable:
    """A vectorized ``dict.get`` over a fixed word list: an open-addressing hash table of the
    exact 16-byte keys of its words (longer words, and lists a key cannot hold, use the dict)."""

    def __init__(self, index: dict[str, int]):
        self.index = index
        self.built = False
        self.k0: np.ndarray | None = None  # k0 of each slot's word; None: only the dict answers

    def build(self) -> None:
        """Hash the words into the table (about 1 s per 1M words; get() does it for long
        queries). Slots hold at most half of the words: probe runs stay short."""
        self.built = True
        keys = keys_of(list(self.index))
        if keys is None:
            return
        k0, k1, long = keys
        short = np.flatnonzero(~long)
        values = np.fromiter(self.index.values(), np.int32, len(self.index))
        bits = max(2 * len(short) - 1, 1).bit_length()
        self.shift, self.mask = np.uint64(64 - bits), (1 << bits) - 1
        # One array per field: numpy gathers rows of a 2-D array several times slower.
        self.k0, self.k1 = np.zeros(1 << bits, np.uint64), np.zeros(1 << bits, np.uint64)
        self.ids = np.full(1 << bits, -1, np.int32)  # -1: an empty slot
        todo, slots = short, self.slots(k0[short], k1[short])
        while len(todo):  # each round, every free slot asked for takes the first word asking
            free = np.flatnonzero(self.ids[slots] < 0)
            taken, first = np.unique(slots[free], return_index=True)
            won = todo[free[first]]
            self.ids[taken], self.k0[taken], self.k1[taken] = values[won], k0[won], k1[won]
            left = np.ones(len(todo), bool)
            left[free[first]] = False
            todo, slots = todo[left], (slots[left] + 1) & self.mask

    def usable(self) -> bool:
        """Whether the table holds the word list (builds it): text_ids needs it."""
        if not self.built:
            self.build()
        return self.k0 is not None

    def slots(self, k0: np.ndarray, k1: np.ndarray) -> np.ndarray:
        """Home slot of each key (the top bits of its hash)."""
        return (mix(k0, k1) >> self.shift).astype(np.int64)

    def probe(self, k0: np.ndarray, k1: np.ndarray, default: int) -> np.ndarray:
        """int32 id of each key, ``default`` where the table lacks it."""
        slots = self.slots(k0, k1)
        found = self.ids[slots]
        hit = (self.k0[slots] == k0) & (self.k1[slots] == k1) & (found >= 0)
        ids = np.where(hit, found, np.int32(default))
        todo = np.flatnonzero(~hit & (found >= 0))
        slots = slots[todo]
        while len(todo):  # walk the rest along their runs of occupied slots to the key or a gap
            slots = (slots + 1) & self.mask
            found = self.ids[slots]
            hit = (self.k0[slots] == k0[todo]) & (self.k1[slots] == k1[todo]) & (found >= 0)
            ids[todo[hit]] = found[hit]
            on = ~hit & (found >= 0)
            todo, slots = todo[on], slots[on]
        return ids

    def get(self, words: Sequence[str], default: int) -> np.ndarray:
        """int32 id of each word, ``default`` where the word is not in the table."""
        if not self.built and len(words) >= BUILD_AT:
            self.build()
        keys = keys_of(words) if self.k0 is not None else None
        if keys is None:
            get = self.index.get
            return np.fromiter((get(w, default) for w in words), np.int32, len(words))
        k0, k1, long = keys
        ids = self.probe(k0, k1, default)
        for j in np.flatnonzero(long).tolist():
            ids[j] = self.index.get(words[j], default)
        return ids

    def text_ids(self, text: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Ids of the words of UTF-8 ``text`` split on ASCII whitespace (-1 where the table
        lacks a word) and the positions of its NUL words, without one Python object per word;
        only for a ``usable()`` table."""
        if not self.usable():
            raise ValueError("the word list has words a 16-byte key cannot hold: use get()")
        a = np.frombuffer(text, np.uint8)
        starts, ends = word_bounds(a)
        k0, k1 = word_keys(text, a, starts, ends)
        ids = self.probe(k0, k1, -1)
        # Keys drop trailing NULs (as padding): words holding a NUL, other than the NUL word,
        # are looked up in the dict, as are words over 16 bytes.
        nul_words = np.searchsorted(starts, np.flatnonzero(a == 0), side="right") - 1
        lone = ends[nul_words] - starts[nul_words] == 1
        marks = nul_words[lone]
        odd = np.union1d(np.flatnonzero(ends - starts > 16), nul_words[~lone])
        get = self.index.get
        for j, s, e in zip(odd.tolist(), starts[odd].tolist(), ends[odd].tolist()):
            ids[j] = get(text[s:e].decode("utf-8"), -1)
        return ids, marks


# Lead bytes of the multi-byte whitespace str.split() knows and bytes.split() does not
# (corpora/encoding.py's EXOTIC_SPACE; its one-byte ones are \x1c-\x1f).
EXOTIC_LEAD = np.zeros(256, bool)
EXOTIC_LEAD[[0xC2, 0xE1, 0xE2, 0xE3]] = True


def has_exotic_space(data: bytes) -> bool:
    """``EXOTIC_SPACE.search(data)`` (corpora/encoding.py) by memchr scans for \x1c-\x1f, then
    array tests on the few candidate lead bytes among the non-ASCII bytes (none in ASCII text)."""
    if any(sep in data for sep in (b"\x1c", b"\x1d", b"\x1e", b"\x1f")):
        return True
    if data.isascii():
        return False
    a = np.frombuffer(data + b"\0\0", np.uint8)
    lead = np.flatnonzero(a[:-2] >= 0xC2)  # lead bytes of multi-byte characters (and the like)
    lead = lead[EXOTIC_LEAD[a[lead]]]
    b0, b1, b2 = a[lead], a[lead + 1], a[lead + 2]
    e2_80_third = ((b2 >= 0x80) & (b2 <= 0x8A)) | np.isin(b2, (0xA8, 0xA9, 0xAF))
    e2_80 = (b0 == 0xE2) & (b1 == 0x80) & e2_80_third
    return bool(
        (
            ((b0 == 0xC2) & ((b1 == 0x85) | (b1 == 0xA0)))
            | ((b0 == 0xE1) & (b1 == 0x9A) & (b2 == 0x80))
            | e2_80
            | ((b0 == 0xE2) & (b1 == 0x81) & (b2 == 0x9F))
            | ((b0 == 0xE3) & (b1 == 0x80) & (b2 == 0x80))
        ).any()
    )
