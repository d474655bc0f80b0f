"""Encoding: the whole documents that start in a byte range of a corpus file, as token ids.

A dataset's ``Documents`` (datasets.py) pair a boundary finder (boundaries.py) with a
``Tokenization``: ``WordLines`` (UTF-8 lines split on whitespace, WikiText rules, with the dataset's
own document rule) or ``Characters`` (one token per byte or character, charlevel.py). Ids are
local to the chunk (first appearance, what counting needs) or a vocabulary's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

import fsspec
import numpy as np

from data_pipeline.corpora.boundaries import (
    BLANK_LINE,
    TITLE_BOUNDARY,
    Finder,
    boundary_at_or_after,
    end_of_last_whole_document,
    read_range,
)
from data_pipeline.corpora.charlevel import CharTokenizer
from data_pipeline.shards.errors import CorpusFormatError
from data_pipeline.vocab import EOS, SENTENCE, Vocab
from data_pipeline.wordids import has_exotic_space, split_ids

# A character that never occurs in text corpora; it stands for a line end while splitting.
MARK = b"\x00"
# TITLE_BOUNDARY as the newline before it (only that consumed, so back-to-back titles both
# match): a literal first byte lets re jump between line ends where "^" tries every byte (over a
# whole piece, 15x slower).
TITLE_AFTER_NEWLINE = re.compile(b"\n(?=" + TITLE_BOUNDARY.pattern.removeprefix(b"^") + b")", re.M)
BLANK_RUN = re.compile(rb"\n(?:" + BLANK_LINE + rb")+")  # a break between text blocks
# Whitespace to str.split() that bytes.split() does not know, as UTF-8 and as text.
EXOTIC_SPACE = re.compile(
    rb"[\x1c-\x1f]|\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f|\xe3\x80\x80"
)
EXOTIC_SPACE_TEXT = re.compile(
    "[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)


@dataclass
class EncodedChunk:
    """Tokens of a run of whole documents: ids local to the chunk, or a vocabulary's."""

    words: list[bytes] | None
    """Distinct words (UTF-8) in first-appearance order, local id i is words[i]; None when the
    ids are a vocabulary's."""
    ids: np.ndarray
    """int32 local or vocabulary id of every token, in corpus order."""
    doc_lengths: np.ndarray
    """int64 token count of each document; sums to len(ids)."""
    source_bytes: int
    """Bytes of the source file this chunk accounts for (for progress)."""
    oov_tokens: int = 0
    """Tokens mapped to the vocabulary's unknown token that are not that token themselves."""
    bad_records: int = 0
    """Malformed records left out (record corpora with --skip-bad-records)."""

    @classmethod
    def empty(cls) -> EncodedChunk:
        """A chunk without documents (a range holding no document start)."""
        return cls([], np.zeros(0, np.int32), np.zeros(0, np.int64), 0)


@dataclass
class Tokens:
    """The words of a text with its line marks (MARK words) located."""

    words: list[bytes] | None
    """Distinct words in first-appearance order (a MARK word replaced by the word it stands
    for); None when the ids are a vocabulary's."""
    ids: np.ndarray
    """int32 id of every word (local or the vocabulary's)."""
    marks: np.ndarray
    """Positions of the MARK words."""
    oov_tokens: int
    """Words the vocabulary lacks (0 for local ids)."""


# Tokenizer(text, mark_word): the Tokens of text, its MARK words standing for mark_word.
Tokenizer = Callable[[bytes, str], Tokens]


def local_tokens(text: bytes, mark_word: str) -> Tokens:
    """Ids local to ``text``, by first appearance (what counting needs)."""
    words, ids = split_ids(text)
    if MARK not in words:
        return Tokens(words, ids, np.zeros(0, np.int64), 0)
    mark_id = words.index(MARK)
    words[mark_id] = mark_word.encode()
    return Tokens(words, ids, np.flatnonzero(ids == mark_id), 0)


def tokenizer(vocab: Vocab | None) -> Tokenizer:
    """Straight to ``vocab``'s ids where its hash table can say them, else local ids."""
    if vocab is None or not vocab.table.usable():
        return local_tokens

    def vocab_tokens(text: bytes, mark_word: str) -> Tokens:
        return Tokens(None, *vocab.encode_text(text, mark_word))

    return vocab_tokens


def normalized(data: bytes) -> bytes:
    """Bytes whose ASCII-whitespace split per line equals the reference's ``str.split()``."""
    # Rare: CR line ends (the reference reads with universal newlines) or whitespace that only
    # str.split() knows. Replacing the latter by spaces keeps the tokens (they separate words).
    if b"\r" not in data and not has_exotic_space(data):
        return data
    text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    return EXOTIC_SPACE_TEXT.sub(" ", text).encode("utf-8")


def encode_lines(data: bytes, tokenize: Tokenizer, doc_starts_at_lines: list[int]) -> EncodedChunk:
    """Lines + ``<eos>``; documents start at the given line numbers (0 is implied)."""
    tokens = tokenize(data.replace(b"\n", b" \x00 "), EOS)
    if not len(tokens.marks):
        return EncodedChunk(tokens.words, tokens.ids, np.zeros(0, np.int64), len(data))
    starts = tokens.marks[np.asarray(doc_starts_at_lines, dtype=np.int64) - 1] + 1
    bounds = np.concatenate([[0], starts, [len(tokens.ids)]])
    lengths = np.diff(bounds).astype(np.int64)
    return EncodedChunk(tokens.words, tokens.ids, lengths, len(data), tokens.oov_tokens)


def encode_wikitext(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """WikiText lines + ``<eos>``; articles start at title boundaries."""
    lines, pos, doc_lines = 0, 0, []
    for m in TITLE_AFTER_NEWLINE.finditer(data):
        lines += data.count(b"\n", pos, m.start() + 1)
        pos = m.start() + 1
        doc_lines.append(lines)
    return encode_lines(data, tokenize, doc_lines)


def encode_lm1b(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """Each line a sentence document ``<S> w1 ... wn <S>``."""
    marked = b"\x00 " + data[:-1].replace(b"\n", b" \x00 \x00 ") + b" \x00"
    tokens = tokenize(marked, SENTENCE)
    marks = tokens.marks
    lengths = (marks[1::2] - marks[0::2] + 1).astype(np.int64)
    return EncodedChunk(tokens.words, tokens.ids, lengths, len(data), tokens.oov_tokens)


def encode_text_blocks(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """Blank-line-separated blocks, each a document of lines + ``<eos>``."""
    blocks = [b.strip(b"\n") for b in BLANK_RUN.split(b"\n" + data) if b.strip()]
    line_counts = np.cumsum([b.count(b"\n") + 1 for b in blocks])
    chunk = encode_lines(b"\n".join(blocks) + b"\n", tokenize, line_counts[:-1].tolist())
    chunk.source_bytes = len(data)
    return chunk


def encode_text_file(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """A whole file as one document of lines + ``<eos>``."""
    return encode_lines(data, tokenize, [])


def encode_ptb(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """A whole PTB file as one document of lower-cased lines + ``<eos>``."""
    lower = data.lower() if data.isascii() else data.decode().lower().encode()
    return encode_lines(lower, tokenize, [])


def in_vocab(chunk: EncodedChunk, vocab: Vocab | None) -> EncodedChunk:
    """The chunk in ``vocab``'s ids (as it is without a vocabulary or if it has them already)."""
    if vocab is None or chunk.words is None:
        return chunk
    words = b" ".join(chunk.words).decode("utf-8").split(" ") if chunk.words else []
    ids, oov_tokens = vocab.encode_local(words, chunk.ids)
    return EncodedChunk(None, ids, chunk.doc_lengths, chunk.source_bytes, oov_tokens)


class Tokenization(Protocol):
    """How the bytes of whole documents become tokens (WordLines, Characters)."""

    level: ClassVar[str]
    """``word``, ``subword`` or ``char`` (the loss of char-level data reads as bits per
    character)."""

    def encode(
        self, data: bytes, url: str, first: int, last: int, vocab: Vocab | None
    ) -> EncodedChunk:
        """Tokens of the whole documents in bytes [first, last) of ``url`` (local ids, or
        ``vocab``'s where it can say them)."""


@dataclass(frozen=True)
class WordLines:
    """Words of UTF-8 text lines split on whitespace, ``<eos>`` per line (WikiText rules)."""

    level: ClassVar[str] = "word"
    documents: Callable[[bytes, Tokenizer], EncodedChunk]
    """The tokens and documents of whole documents' text (newline-terminated)."""

    def encode(
        self, data: bytes, url: str, first: int, last: int, vocab: Vocab | None
    ) -> EncodedChunk:
        """Tokens of the whole documents in bytes [first, last) of ``url``: ``vocab``'s ids
        where its table can say them (Vocab.encode_text), else local ids."""
        where = f"{url}: bytes {first}-{last}"
        if MARK in data:
            raise CorpusFormatError(f"{where} hold a NUL character: not text")
        try:
            data = normalized(data)
            if data and not data.endswith(b"\n"):
                data += b"\n"  # the final line of a file without a trailing newline
            if not data.isascii():  # words are cut at ASCII bytes: UTF-8 text gives UTF-8 words
                data.decode("utf-8")
            return self.documents(data, tokenizer(vocab)) if data.strip() else EncodedChunk.empty()
        except UnicodeDecodeError as err:
            raise CorpusFormatError(f"{where} are not UTF-8 text: {err}") from err


@dataclass(frozen=True)
class Characters:
    """One token per byte or character, each file one document (charlevel.py)."""

    level: ClassVar[str] = "char"
    tokenizer: CharTokenizer
    """The tokenization (and its inverse, for prompts and generated text)."""

    def encode(
        self, data: bytes, url: str, first: int, last: int, vocab: Vocab | None
    ) -> EncodedChunk:
        """Tokens of a whole file's bytes (``first`` 0, ``last`` its end), in local ids."""
        words, ids = self.tokenizer.tokens(data, url) if data else ([], np.zeros(0, np.int32))
        lengths = np.asarray([len(ids)] if len(ids) else [], np.int64)
        return EncodedChunk([w.encode() for w in words], ids, lengths, 0)


@dataclass(frozen=True)
class Documents:
    """How a split file divides into documents, and how their bytes become tokens."""

    kind: str
    """Stable name, recorded in every split's fingerprint (a new name prepares splits anew)."""
    tokenization: Tokenization
    """How the bytes of whole documents become tokens."""
    next_start: Finder | None = None
    """The first document start at or after a position of some bytes; None: a file is one
    document."""
    drops_cut_tail: bool = False
    """A file not ending with a newline was cut short: its last, partial document is left out."""

    def usable_end(self, fs, path: str, url: str) -> int:
        """Bytes of a file that hold its (whole) documents."""
        if self.drops_cut_tail:
            return end_of_last_whole_document(fs, path, url, self.next_start)
        return fs.size(path)

    def encode_range(
        self, url: str, start: int, stop: int, end: int, storage_options: dict | None = None,
        vocab: Vocab | None = None,
    ) -> EncodedChunk:  # fmt: skip
        """Tokenize the whole documents that begin in bytes [start, stop) of a file whose
        documents end at ``end`` (runs in workers), into ``vocab``'s ids when one is given, else
        ids local to the chunk."""
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        first = boundary_at_or_after(fs, path, url, self.next_start, start, end)
        last = boundary_at_or_after(fs, path, url, self.next_start, stop, end)
        data = read_range(fs, path, first, last, url) if last > first else b""
        chunk = self.tokenization.encode(data, url, first, last, vocab)
        chunk.source_bytes = stop - start
        return in_vocab(chunk, vocab)
