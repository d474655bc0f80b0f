"""Vocabulary: ordering exactly as the Transformer-XL reference code, encode/decode, identity hash.

Ordering (reference ``Vocab.build_vocab``): the special tokens first, then every other token by
descending count, ties broken by first appearance in the corpus (``Counter.most_common`` is a
stable sort over insertion order). Tokens below ``min_count`` are left out; words missing from
the vocabulary encode as its unknown token (``<unk>`` for WikiText/text, ``<UNK>`` for lm1b).

File format (``vocab.txt``): one ``token<TAB>count`` line per id, in id order. Loading also
accepts ``token count`` lines and bare ``token`` lines, such as the official lm1b
``1b_word_vocab.txt``. Lines end at newlines alone and fields part at ASCII whitespace alone
(``vocab_entries``), as the corpus's words do: a token may hold a no-break space.
``sha256`` identifies the token list (not the counts), so a vocabulary
reloaded from another file with the same tokens in the same order has the same hash.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from collections.abc import Iterable, Sequence

import fsspec
import numpy as np

from data_pipeline.limits import VOCAB_BYTES
from data_pipeline.received import decoded, read_url
from data_pipeline.shards.errors import VocabMismatchError, reading
from data_pipeline.wordids import WordTable

EOS = "<eos>"
SENTENCE = "<S>"
UNK_WIKI = "<unk>"
UNK_LM1B = "<UNK>"
ASCII_SPACE = " \t\r\v\f"  # with \n, what bytes.split() parts words at


def vocab_entries(text: str) -> list[list[str]]:
    r"""The ``[token, count...]`` fields of each non-blank line of a vocab.txt.

    Lines end at ``\n`` and fields part at ASCII whitespace, as bytes.split() parts the corpus's
    words; str.splitlines() and str.split() would also cut at ``\x1c`` or a no-break space.
    """
    lines = (line.strip(ASCII_SPACE) for line in text.split("\n"))
    return [re.split(f"[{ASCII_SPACE}]+", line) for line in lines if line]


class Vocab:
    """An ordered token list with counts; ids are positions in the list."""

    def __init__(self, tokens: Sequence[str], counts: Sequence[int] | None = None):
        self.tokens = list(tokens)
        self.counts = [0] * len(self.tokens) if counts is None else [int(c) for c in counts]
        self.index = {tok: i for i, tok in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise VocabMismatchError("vocabulary lists a token twice; every token must be unique")
        self.table = WordTable(self.index)
        self.unk = next((t for t in (UNK_LM1B, UNK_WIKI) if t in self.index), None)

    def __len__(self) -> int:
        return len(self.tokens)

    @functools.cached_property  # the token list never changes; preparing asks once per unit
    def sha256(self) -> str:
        """Hash of the token list in id order (counts excluded)."""
        return hashlib.sha256(("\n".join(self.tokens) + "\n").encode("utf-8")).hexdigest()

    def lookup_table(self, words: Sequence[str]) -> np.ndarray:
        """Ids of ``words`` as an int32 array; unknown words become the unknown token's id."""
        unk_id = self.index.get(self.unk, -1) if self.unk else -1
        table = self.table.get(words, unk_id)
        if unk_id < 0 and (table < 0).any():
            missing = [w for w, i in zip(words, table) if i < 0][:5]
            raise VocabMismatchError(
                f"words {missing} are not in the vocabulary and it has no unknown token "
                f"({UNK_WIKI} or {UNK_LM1B}); build the vocabulary from data that contains them"
            )
        return table

    def encode_local(self, words: list[str], ids: np.ndarray) -> tuple[np.ndarray, int]:
        """Ids of tokens given as indices into ``words`` (distinct words), and how many of
        them are words this vocabulary lacks (mapped to the unknown token, not being it)."""
        table = self.lookup_table(words)
        unknown = np.zeros(len(words), bool)
        if self.unk is not None:
            unknown = table == self.index[self.unk]
            with contextlib.suppress(ValueError):  # distinct words: the unknown token once at most
                unknown[words.index(self.unk)] = False
        return table[ids], int(np.count_nonzero(unknown[ids]))

    def encode_text(self, text: bytes, mark_word: str) -> tuple[np.ndarray, np.ndarray, int]:
        """Ids of the words of UTF-8 ``text`` split on ASCII whitespace, the positions of its
        NUL words (line marks, given ``mark_word``'s id) and how many words it lacks (as in
        encode_local); only where ``self.table.usable()``."""
        ids, marks = self.table.text_ids(text)
        ids[marks] = self.index.get(mark_word, -1)
        missing = ids < 0
        oov_tokens = int(np.count_nonzero(missing))
        if oov_tokens:
            if self.unk is None:  # lookup_table names the missing words and raises
                words = text.split()
                named = (words[j].decode() for j in np.flatnonzero(missing).tolist())
                self.lookup_table(list(dict.fromkeys(mark_word if w == "\0" else w for w in named)))
            ids[missing] = self.index[self.unk]
        return ids, marks, oov_tokens

    def encode(self, words: Iterable[str]) -> np.ndarray:
        """Ids of a sequence of words (int32)."""
        return self.lookup_table(list(words))

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of a sequence of ids."""
        return [self.tokens[i] for i in np.asarray(ids).tolist()]

    def save(self, url: str, storage_options: dict | None = None) -> None:
        """Write ``token<TAB>count`` lines to ``url`` (any fsspec URL)."""
        text = "".join(f"{t}\t{c}\n" for t, c in zip(self.tokens, self.counts))
        with fsspec.open(url, "wt", encoding="utf-8", **(storage_options or {})) as f:
            f.write(text)

    @classmethod
    def load(cls, url: str, storage_options: dict | None = None, given: bool = False) -> Vocab:
        """Read a vocabulary file: ``token[<whitespace>count]`` per line, id order; a local one
        as a received file (data_pipeline.received; ``given``: one named on the command line,
        whose link is followed), a remote one streamed, under VOCAB_BYTES."""
        what = "vocabulary file (vocab.txt)"
        with reading("vocabulary file", url):
            data = read_url(url, VOCAB_BYTES, what, storage_options, given)
        fields = vocab_entries(decoded(data, url, "vocabulary file (vocab.txt)"))
        bad = next((f for f in fields if len(f) > 1 and not f[1].isdigit()), None)
        if bad:
            raise VocabMismatchError(f"{url}: entry {bad[0]!r} has count {bad[1]!r}, not a number")
        return cls([f[0] for f in fields], [int(f[1]) if len(f) > 1 else 0 for f in fields])

    @classmethod
    def build(
        cls, words: Sequence[str], counts: np.ndarray, specials: Sequence[str], min_count: int = 0
    ) -> Vocab:
        """Order ``words`` (given in first-appearance order) as the reference code does."""
        counts = np.asarray(counts, dtype=np.int64)
        by_count = np.argsort(-counts, kind="stable")
        kept = by_count[counts[by_count] >= min_count]
        count_of = dict(zip(words, counts.tolist()))
        tokens = list(specials) + [words[i] for i in kept.tolist() if words[i] not in specials]
        return cls(tokens, [count_of.get(t, 0) for t in tokens])
