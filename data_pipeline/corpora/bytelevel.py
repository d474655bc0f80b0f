"""Byte-level BPE encoding without the library's per-token overhead, token for token the same.

A GPT-2-style byte-level tokenizer (``ByteLevel`` pre-tokenizer with its regex, a BPE model, no
normalizer or added tokens) encodes a document as the BPE of each pre-token, one after another.
The ``tokenizers`` library spends most of its time per token building offsets, token strings and
alignments nobody here reads; this encoder splits documents with Python's ``re`` and looks each
pre-token's ids up in a cache, asking the library's own BPE model only for pre-tokens it has not
seen (a few percent on real text).

Exactness: the regex is the library's, over four classes of characters: letters (``\\p{L}``),
numbers (``\\p{N}``), whitespace (``\\s``) and the rest, written out as character sets. Each
character outside ASCII is placed in its class by asking the library's pre-tokenizer whether it
joins an ASCII letter, digit, mark or tab into one pre-token, once per character (the sets and the
regex grow as a batch brings new ones), so the sets are the library's own whatever its Unicode
version. A character none of the four joins (a lone surrogate) sends its document to the
library.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
from tokenizers import Tokenizer, pre_tokenizers

from data_pipeline.errors import DataError

# The library's ByteLevel regex, "'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
# \s+(?!\S)|\s+", with its classes as sets of characters (the rest: neither of the three).
PATTERN = (
    "'(?:[sdmt]|ll|ve|re)| ?[{letter}]+| ?[{number}]+| ?[^{space}{letter}{number}]+"
    "|[{space}]+(?![^{space}])|[{space}]+"
)
# The ASCII members of each class (the library agrees: tests/data_pipeline/corpora).
ASCII_SETS = {"letter": "A-Za-z", "number": "0-9", "space": "\t\n\x0b\x0c\r ", "other": ""}
# Per class, the ASCII character a probe puts before a character: the two make one pre-token
# exactly when the character is of that class.
PROBES = {"letter": "a", "number": "0", "other": "!", "space": "\t"}
NON_ASCII = re.compile("[^\x00-\x7f]")
# Distinct pre-tokens whose ids are kept; the cache starts again when full (bounded memory).
CACHE_ENTRIES = 1 << 19
# One document in this many is encoded by the library as well and compared (about 3% more CPU
# on real text): a corpus with text this encoder gets wrong stops preparation, never a shard
# of other ids than the library's.
CHECK_EVERY = 100


class EncoderMismatch(DataError):
    """This encoder and the library disagree on a document."""


def byte_chars() -> dict[int, str]:
    """The byte-level alphabet: the character each byte is written as (GPT-2's table)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    moved = [b for b in range(256) if b not in kept]
    return {**{b: chr(b) for b in kept}, **{b: chr(256 + k) for k, b in enumerate(moved)}}


def fits(tokenizer_json: str) -> bool:
    """Whether a tokenizer.json is the plain byte-level BPE this encoder reproduces."""
    spec = json.loads(tokenizer_json)
    pre = spec.get("pre_tokenizer") or {}
    model = spec.get("model") or {}
    return (
        spec.get("normalizer") is None
        and not spec.get("added_tokens")
        and spec.get("truncation") is None
        and spec.get("padding") is None
        and (spec.get("post_processor") or {"type": "ByteLevel"})["type"] == "ByteLevel"
        and pre.get("type") == "ByteLevel"
        and pre.get("add_prefix_space") is False
        and pre.get("use_regex", True) is True
        and model.get("type") == "BPE"
        and model.get("dropout") is None
    )


class CharClasses:
    """The library's class of each character met so far, and the regex over them."""

    def __init__(self):
        self.members: dict[str, list[str]] = {name: [] for name in PROBES}
        self.known: set[str] = set()
        self.unplaced: set[str] = set()  # of no class: their documents go to the library
        self.probe = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        self.regex = self.compile()

    def learn(self, chars: set[str]) -> None:
        """Place the characters not met before (and compile the regex again if there were)."""
        new = chars - self.known - self.unplaced
        for char in new:
            name = next((n for n, probe in PROBES.items() if self.joins(probe, char)), None)
            if name is None:
                self.unplaced.add(char)
            else:
                self.members[name].append(re.escape(char))
                self.known.add(char)
        if new - self.unplaced:
            self.regex = self.compile()

    def joins(self, probe: str, char: str) -> bool:
        """Whether the library makes one pre-token of ``probe`` followed by ``char``."""
        try:
            return len(self.probe.pre_tokenize_str(probe + char)) == 1
        except UnicodeError:  # a lone surrogate: no text the library encodes
            return False

    def compile(self) -> re.Pattern:
        sets = {name: ASCII_SETS[name] + "".join(self.members[name]) for name in PROBES}
        return re.compile(PATTERN.format(**sets))


class ByteLevelEncoder:
    """Encodes documents as ``tokenizer.encode(document, add_special_tokens=False).ids`` would,
    for a tokenizer that ``fits``."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer, self.model = tokenizer, tokenizer.model
        self.classes = CharClasses()
        self.bytes = byte_chars()
        self.ascii = str.maketrans({chr(b): c for b, c in self.bytes.items() if b < 128})
        self.cache: dict[str, tuple[int, ...]] = {}
        self.documents = 0  # encoded so far, for CHECK_EVERY

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """int32 ids of the documents back to back, and int64 tokens per document."""
        self.classes.learn(set(NON_ASCII.findall("".join(t for t in texts if not t.isascii()))))
        ids: list[int] = []
        lengths = []
        cached = self.cache.__getitem__
        for text in texts:
            before = len(ids)
            pre_tokens = self.pre_tokens(text)
            if pre_tokens is None:
                ids += self.tokenizer.encode(text, add_special_tokens=False).ids
            else:
                try:  # no Python call per pre-token while all are cached
                    ids += itertools.chain.from_iterable(map(cached, pre_tokens))
                except KeyError:
                    del ids[before:]
                    ids += itertools.chain.from_iterable(map(self.ids_of, pre_tokens))
            lengths.append(len(ids) - before)
            self.documents += 1
            if self.documents % CHECK_EVERY == 0:
                self.check(text, ids[before:])
        return np.array(ids, np.int32), np.array(lengths, np.int64)

    def check(self, text: str, ids: list[int]) -> None:
        """Raise EncoderMismatch unless the library encodes `text` as `ids`."""
        expected = self.tokenizer.encode(text, add_special_tokens=False).ids
        if ids != expected:
            at = next((i for i, pair in enumerate(zip(ids, expected)) if pair[0] != pair[1]), None)
            at = min(len(ids), len(expected)) if at is None else at
            raise EncoderMismatch(
                f"the fast byte-level encoder and the tokenizers library disagree at token {at} "
                f"of a document starting {text[:60]!r}; prepare with TXL_LIBRARY_ENCODER=1 in "
                "the environment (the library encodes everything, slower) and report the document"
            )

    def pre_tokens(self, text: str) -> list[str] | None:
        """The library's pre-tokens of a document whose characters ``encode`` has placed
        (None: one of no class)."""
        if self.classes.unplaced and not self.classes.unplaced.isdisjoint(text):
            return None
        return self.classes.regex.findall(text)

    def ids_of(self, pre_token: str) -> tuple[int, ...]:
        """The BPE ids of a pre-token, cached (else asked of the library's model)."""
        if (ids := self.cache.get(pre_token)) is not None:
            return ids
        if len(self.cache) >= CACHE_ENTRIES:
            self.cache.clear()
        tokens = self.model.tokenize(self.byte_level(pre_token))
        ids = self.cache[pre_token] = tuple(t.id for t in tokens)
        return ids

    def byte_level(self, pre_token: str) -> str:
        """The pre-token as the byte-level alphabet writes it (what the BPE model sees)."""
        if pre_token.isascii():
            return pre_token.translate(self.ascii)
        return "".join(self.bytes[b] for b in pre_token.encode("utf-8"))
