"""Byte-level BPE encoding without the library's per-token overhead, token for token the same.

A GPT-2-style byte-level tokenizer (``ByteLevel`` pre-tokenizer with its regex, a BPE model, no
normalizer, no added tokens but special ones) encodes a document as the BPE of each pre-token,
one after another.
The ``tokenizers`` library spends most of its time per token building offsets, token strings and
alignments nobody here reads; this encoder splits documents with Python's ``re`` and looks each
pre-token's ids up in a cache, asking the library's own BPE model only for pre-tokens it has not
seen (a few percent on real text).

Exactness: the regex is the library's, over four classes of characters: letters (``\\p{L}``),
numbers (``\\p{N}``), whitespace (``\\s``) and the rest, written out as character sets. Each
character outside ASCII is placed in its class by asking the library's pre-tokenizer whether it
joins an ASCII letter, digit, mark or tab into one pre-token, once per character, so the sets are
the library's own whatever its Unicode version. A character none of the four joins (a lone
surrogate) sends its document to the library, and so does a document holding the text of a
special token (an end-of-text token), which the library encodes as that token.

Cost linear in the input: compiling takes time in the regex's size, so recompiling it for every
new character made a corpus bringing one per batch quadratic. It is compiled again only when the
batch's text pays for it (COMPILE_TEXT characters per character the regex holds) or once the
characters placed since its last compile are as many as it holds. Until then a document holding
one of those newer characters is split by a table of every character's class: the same regex over
ASCII stand-ins of each character's class, its pieces cut from the document (slower).
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer, pre_tokenizers

from data_pipeline.limits import PRE_TOKEN_BYTES
from data_pipeline.shards.errors import DataError

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
# A compile costs 1-3 us per character the regex holds, splitting ~10 ns per character of text:
# a batch of this many characters per held one compiles for at most a tenth of its splitting.
COMPILE_TEXT = 2000
# The regex over ASCII alone, for text whose every character is written as an ASCII member of
# its class (a probe): what CharClasses.by_table splits.
STAND_IN_REGEX = re.compile(PATTERN.format(**ASCII_SETS).encode("ascii"))
# Distinct pre-tokens whose ids are kept; the cache starts again when full (bounded memory).
CACHE_ENTRIES = 1 << 19
# One document in this many is encoded by the library as well and compared (about 3% more CPU
# on real text): a corpus with text this encoder gets wrong stops preparation, never a shard
# of other ids than the library's.
CHECK_EVERY = 100


class EncoderMismatch(DataError):
    """This encoder and the library disagree on a document."""


class PreTokenTooLong(ValueError):
    """A document holds a pre-token longer than limits.PRE_TOKEN_BYTES."""

    def __init__(self, size: int):
        super().__init__(
            f"a pre-token (a run of letters, digits, symbols or spaces) of {size} bytes, more "
            f"than {PRE_TOKEN_BYTES.named()}"
        )


@dataclass
class Encoded:
    """A batch of documents as token ids, less those refused."""

    ids: np.ndarray
    """int32 ids of the encoded documents, back to back."""
    lengths: np.ndarray
    """int64 tokens of each encoded document."""
    refused: dict[int, str] = field(default_factory=dict)
    """Why each document left out was refused (a pre-token too long), by its index."""


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
        and all(token.get("special") is True for token in spec.get("added_tokens") or [])
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
    """The library's class of each character met so far, the regex over them, and the newer
    characters it does not hold yet."""

    def __init__(self):
        self.members: dict[str, list[str]] = {name: [] for name in PROBES}
        # Each character as an ASCII member of its class (ASCII as itself; 0: not placed).
        self.stand_ins = np.zeros(sys.maxunicode + 1, np.uint8)
        self.stand_ins[:0x80] = np.arange(0x80)
        self.held = 0  # characters outside ASCII in the regex
        self.newer: set[str] = set()  # placed since the regex was compiled
        self.unplaced: set[str] = set()  # of no class: their documents go to the library
        self.probe = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        self.regex = self.compile()

    def learn(self, chars: set[str], text_chars: int) -> None:
        """Place the characters not met before (of a batch of ``text_chars`` characters); compile
        the regex again when the batch pays for it or the newer ones are as many as it holds."""
        for char in chars - self.unplaced:
            if self.stand_ins[ord(char)]:
                continue
            name = next((n for n, probe in PROBES.items() if self.joins(probe, char)), None)
            if name is None:
                self.unplaced.add(char)
            else:
                self.members[name].append(re.escape(char))
                self.stand_ins[ord(char)] = ord(PROBES[name])
                self.newer.add(char)
        size = self.held + len(self.newer)
        if self.newer and (len(self.newer) > self.held or text_chars >= COMPILE_TEXT * size):
            self.regex = self.compile()
            self.held += len(self.newer)
            self.newer.clear()

    def joins(self, probe: str, char: str) -> bool:
        """Whether the library makes one pre-token of ``probe`` followed by ``char``."""
        try:
            return len(self.probe.pre_tokenize_str(probe + char)) == 1
        except UnicodeError:  # a lone surrogate: no text the library encodes
            return False

    def compile(self) -> re.Pattern:
        sets = {name: ASCII_SETS[name] + "".join(self.members[name]) for name in PROBES}
        return re.compile(PATTERN.format(**sets))

    def pre_tokens(self, text: str, newer: set[str] | None = None) -> list[str] | None:
        """The library's pre-tokens of a text whose characters were learned (None: one of no
        class); ``newer``: those the regex does not hold yet (of its batch)."""
        if self.unplaced and not self.unplaced.isdisjoint(text):
            return None
        newer = self.newer if newer is None else newer
        if newer and not newer.isdisjoint(text):
            return self.by_table(text)
        return self.regex.findall(text)

    def by_table(self, text: str) -> list[str]:
        """The pre-tokens of a text of placed characters, split by their stand-ins."""
        codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        ends = list(itertools.accumulate(map(len, STAND_IN_REGEX.findall(self.stand_ins[codes]))))
        return [text[a:b] for a, b in zip([0, *ends], ends)]


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
        self.max_pre_token = PRE_TOKEN_BYTES.value()  # read again by each encode
        # The special tokens' texts: a document holding one goes to the library.
        self.specials = [t.content for t in tokenizer.get_added_tokens_decoder().values()]

    def encode(self, texts: list[str]) -> Encoded:
        """The documents' ids; one holding a pre-token over limits.PRE_TOKEN_BYTES is refused
        (the library's BPE takes ~170 bytes of memory per byte of one)."""
        beyond_ascii = "".join(t for t in texts if not t.isascii())
        chars = set(NON_ASCII.findall(beyond_ascii))
        self.classes.learn(chars, len(beyond_ascii))
        newer = self.classes.newer & chars
        self.max_pre_token = PRE_TOKEN_BYTES.value()
        ids: list[int] = []
        lengths, refused = [], {}
        cached = self.cache.__getitem__
        for index, text in enumerate(texts):
            before = len(ids)
            pre_tokens = self.classes.pre_tokens(text, newer)
            if pre_tokens is None or any(s in text for s in self.specials):
                ids += self.tokenizer.encode(text, add_special_tokens=False).ids
            else:
                try:  # no Python call per pre-token while all are cached
                    ids += itertools.chain.from_iterable(map(cached, pre_tokens))
                except KeyError:
                    del ids[before:]
                    try:
                        ids += itertools.chain.from_iterable(map(self.ids_of, pre_tokens))
                    except PreTokenTooLong as err:
                        del ids[before:]
                        refused[index] = str(err)
                        continue
            lengths.append(len(ids) - before)
            self.documents += 1
            if self.documents % CHECK_EVERY == 0:
                self.check(text, ids[before:])
        return Encoded(np.array(ids, np.int32), np.array(lengths, np.int64), refused)

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

    def ids_of(self, pre_token: str) -> tuple[int, ...]:
        """The BPE ids of a pre-token, cached (else asked of the library's model)."""
        if (ids := self.cache.get(pre_token)) is not None:
            return ids
        if len(self.cache) >= CACHE_ENTRIES:
            self.cache.clear()
        chars = self.byte_level(pre_token)  # a character per byte
        if len(chars) > self.max_pre_token:
            raise PreTokenTooLong(len(chars))
        tokens = self.model.tokenize(chars)
        ids = self.cache[pre_token] = tuple(t.id for t in tokens)
        return ids

    def byte_level(self, pre_token: str) -> str:
        """The pre-token as the byte-level alphabet writes it (what the BPE model sees)."""
        if pre_token.isascii():
            return pre_token.translate(self.ascii)
        return "".join(self.bytes[b] for b in pre_token.encode("utf-8"))


class PreTokenCheck:
    """Refuses a document holding a byte-level pre-token over limits.PRE_TOKEN_BYTES before the
    BPE trainer sees it (training on a 10 MiB one ran for more than ten minutes)."""

    def __init__(self):
        self.classes = CharClasses()

    def __call__(self, text: str) -> None:
        """Raise PreTokenTooLong if ``text`` holds a pre-token over the cap."""
        limit = PRE_TOKEN_BYTES.value()
        if len(text) * 4 <= limit:  # UTF-8: at most 4 bytes a character
            return
        self.classes.learn(set(NON_ASCII.findall(text)), len(text))
        pieces = self.classes.pre_tokens(text) or []  # none: no text (the trainer refuses it)
        size = max((len(p.encode("utf-8")) for p in pieces if len(p) * 4 > limit), default=0)
        if size > limit:
            raise PreTokenTooLong(size)
