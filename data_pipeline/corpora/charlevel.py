"""enwik8 and text8: one file cut by position into train/valid/test, one token per byte or char.

As the reference prepares them (kimiyoung/transformer-xl ``getdata.sh``, which runs
salesforce/awd-lstm-lm ``prep_enwik8.py`` and its own ``prep_text8.py``, then
``pytorch/data_utils.Corpus``):

* The last ``test_chars`` bytes (enwik8) or characters (text8) are test, the ``test_chars``
  before them valid, the rest train (``test_chars`` is 5,000,000 in the reference).
* enwik8: ``prep_enwik8.py`` writes every byte as its decimal value, space separated, but a
  newline byte as a line break; ``Corpus`` splits each line on whitespace without ``<eos>``. So
  a newline byte is no token at all (the reference drops it), every other byte is the token
  ``"N"`` (its decimal value).
* text8: ``prep_text8.py`` strips whitespace from both ends of each split, writes space as ``_``
  and every character as a token of its own.
* Vocabulary over train, valid and test, no special tokens, by count with ties by first
  appearance (``data_utils.Corpus`` for enwik8/text8; vocab.py orders it).

Here the splits are cut once into a cache directory as the raw bytes (the reference's
``*.txt.raw``), and each split file is one document that ``ENWIK8`` or ``TEXT8`` tokenizes.
"""

from __future__ import annotations

import contextlib
import re
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from tokenizers import normalizers

from data_pipeline.cache import built_once
from data_pipeline.shards.errors import CorpusFormatError

DEFAULT_TEST_CHARS = 5_000_000
NEWLINE = ord("\n")
SPACE = ord(" ")
NOT_TEXT8 = re.compile(rb"[^a-z ]")
BLOCK = 1 << 22


def cut_splits(local: Path, digest: str, cache: Path, dataset: str, test_chars: int) -> Path:
    """A cache directory with ``{train,valid,test}.txt`` cut from the corpus file (``local``:
    the file itself or the official zip holding it), made once per corpus and ``test_chars``."""

    def cut(tmp: Path) -> None:
        with corpus_file(local, dataset) as (src, size):
            if size <= 2 * test_chars:
                raise CorpusFormatError(
                    f"{local}: {size} bytes, but valid and test take {test_chars} each; "
                    f"give the full {dataset} file, or a smaller --test-chars"
                )
            bounds = {"train": size - 2 * test_chars, "valid": test_chars, "test": test_chars}
            for split, length in bounds.items():
                copy_bytes(src, tmp / f"{split}.txt", length)

    return built_once(cache / f"{digest[:16]}-{dataset}-{test_chars}.d", digest, cut)


@contextlib.contextmanager
def corpus_file(local: Path, dataset: str) -> Iterator[tuple[BinaryIO, int]]:
    """(stream, size) of the corpus: a plain file, or the member named ``dataset`` of a zip (the
    official ``enwik8.zip`` and ``text8.zip``)."""
    if local.name.endswith((".tar", ".tar.gz", ".tgz")):
        raise CorpusFormatError(
            f"{local}: {dataset} comes as {dataset}.zip or the unpacked {dataset} file, not a tar"
        )
    if not zipfile.is_zipfile(local):
        with local.open("rb") as stream:
            yield stream, local.stat().st_size
        return
    with zipfile.ZipFile(local) as zf:
        if dataset not in zf.namelist():
            raise CorpusFormatError(
                f"{local}: no member named {dataset!r} (it has {zf.namelist()[:5]}); "
                f"give the official {dataset}.zip"
            )
        with zf.open(dataset) as stream:
            yield stream, zf.getinfo(dataset).file_size


def copy_bytes(src, path: Path, length: int) -> None:
    """Copy the next ``length`` bytes of ``src`` to ``path``."""
    with path.open("wb") as dst:
        while length > 0:
            block = src.read(min(BLOCK, length))
            if not block:
                raise CorpusFormatError(f"{path.name}: the corpus ended early (truncated zip?)")
            dst.write(block)
            length -= len(block)


def enwik8_tokens(data: bytes, url: str) -> tuple[list[str], np.ndarray]:
    """Distinct tokens in first-appearance order and local ids: a byte's decimal value, newline
    bytes dropped (the reference turns them into line breaks, which its Corpus skips)."""
    values = np.frombuffer(data, np.uint8)
    return by_first_appearance(values[values != NEWLINE], str)


def text8_tokens(data: bytes, url: str) -> tuple[list[str], np.ndarray]:
    """Tokens of a text8 split: one per character of the stripped text, space written ``_``."""
    text = data.strip()
    bad = NOT_TEXT8.search(text)
    if bad:
        at = data.index(text) + bad.start()
        raise CorpusFormatError(
            f"{url}: byte {at} is {bad.group()!r}; text8 holds only a-z and spaces "
            "(give the official text8.zip or its unpacked text8 file)"
        )
    return by_first_appearance(
        np.frombuffer(text, np.uint8), lambda v: "_" if v == SPACE else chr(v)
    )


def by_first_appearance(
    values: np.ndarray, name: Callable[[int], str]
) -> tuple[list[str], np.ndarray]:
    """(names of the distinct byte values in first-appearance order, int32 local ids)."""
    present = np.flatnonzero(np.bincount(values, minlength=256))
    first = np.full(256, len(values))
    # Blocks from the start: every value has usually appeared within the first few.
    for start in range(0, len(values), 1 << 16):
        if (first[present] < len(values)).all():
            break
        seen, at = np.unique(values[start : start + (1 << 16)], return_index=True)
        first[seen] = np.minimum(first[seen], start + at)
    order = present[np.argsort(first[present], kind="stable")]
    local = np.zeros(256, np.int32)
    local[order] = np.arange(len(order), dtype=np.int32)
    return [name(int(v)) for v in order], local[values]


def enwik8_bytes(token: str) -> bytes:
    """The byte an enwik8 token stands for (its decimal value)."""
    return bytes([int(token)])


def text8_bytes(token: str) -> bytes:
    """The character a text8 token stands for (``_``: a space)."""
    return b" " if token == "_" else token.encode()


# Module functions, not lambdas: a CharTokenizer goes to txl-prepare's worker processes pickled.
def enwik8_normalizer() -> normalizers.Normalizer:
    """Newline bytes dropped, as ``enwik8_tokens`` drops them."""
    return normalizers.Replace("\n", "")


def text8_normalizer() -> normalizers.Normalizer:
    """The text stripped at both ends, as ``text8_tokens`` strips it (the library strips
    Unicode whitespace, Python's bytes ASCII whitespace: the same on text8's characters)."""
    return normalizers.Strip()


@dataclass(frozen=True)
class CharTokenizer:
    """A character-level tokenization and its inverse."""

    tokens: Callable[[bytes, str], tuple[list[str], np.ndarray]]
    """(data, its URL for errors) -> distinct tokens in first-appearance order, int32 local ids."""
    token_bytes: Callable[[str], bytes]
    """What a token stands for, the tokenization undone."""
    normalizer: Callable[[], normalizers.Normalizer]
    """What ``tokens`` does to a text before its bytes become tokens, as the tokenizers library's
    normalizer (a Hugging Face export's tokenizer.json, txl_dist/hf/tokenizer_files.py)."""


ENWIK8 = CharTokenizer(enwik8_tokens, enwik8_bytes, enwik8_normalizer)
TEXT8 = CharTokenizer(text8_tokens, text8_bytes, text8_normalizer)
