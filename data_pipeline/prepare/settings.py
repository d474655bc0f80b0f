"""``Settings``: one txl-prepare run's options, each stated here once (its type, default and
meaning), and checked together before anything is read; the command line and ``prepare()``
take them by these names."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from data_pipeline.corpora import datasets
from data_pipeline.corpora.charlevel import DEFAULT_TEST_CHARS
from data_pipeline.corpora.datasets import Dataset
from data_pipeline.corpora.subword import bpe_size
from data_pipeline.prepare.units import DEFAULT_UNIT_BYTES

DEFAULT_SHARD_TOKENS = 1 << 24
DEFAULT_SAMPLE_TOKENS = 1 << 16
DEFAULT_BPE_SAMPLE_BYTES = 1 << 28
PIECE_BYTES = 1 << 22
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "txl-dist")


@dataclass(frozen=True)
class Settings:
    """One txl-prepare run: what to prepare from where, and how shards and work are laid out."""

    dataset: str
    """Name of the dataset (corpora/datasets.py)."""
    out: str
    """Output root (any fsspec URL)."""
    source: str | None = None
    """Directory, file or archive holding the corpus (any fsspec URL); None: the official one."""
    vocab: str | None = None
    """Vocabulary file to encode with; None: build it from the corpus."""
    tokenizer: str | None = None
    """Record datasets: a tokenizer.json (any fsspec URL) or ``bpe:N`` (train one of N tokens)."""
    eos_token: str | None = None
    """Record datasets, a tokenizer file: its end-of-document token; None: its own end-of-text
    token (<|endoftext|>, <|end_of_text|>, </s> or <eos>)."""
    text_field: str = "text"
    """Record datasets: the field (JSONL) or column (Parquet) holding a document's text."""
    skip_bad_records: bool = False
    """Record datasets: leave out (and count) malformed records instead of stopping."""
    bpe_sample_bytes: int = DEFAULT_BPE_SAMPLE_BYTES
    """``bpe:N``: source bytes of the train split to train on, whole pieces spread evenly."""
    shard_size: int = DEFAULT_SHARD_TOKENS
    """Most tokens in a shard."""
    sample_size: int = DEFAULT_SAMPLE_TOKENS
    """Most tokens in a sample (whole documents; a longer one is cut into samples)."""
    unit_bytes: int = DEFAULT_UNIT_BYTES
    """Source bytes per unit: the grain of parts and restarts; no shard spans two units."""
    workers: int = 1
    """Processes that tokenize pieces in parallel."""
    piece_bytes: int = PIECE_BYTES
    """Source bytes per worker task."""
    min_count: int | None = None
    """A built vocabulary leaves out tokens seen fewer times; None: the dataset's default."""
    text_docs: str = "block"
    """What a document of the text dataset is: a block between blank lines, or a file."""
    test_chars: int = DEFAULT_TEST_CHARS
    """enwik8 / text8: bytes (characters) of the test split and of the valid split."""
    source_checksum: str | None = None
    """``ALGO:HEX`` a source archive must hash to."""
    cache_dir: str = DEFAULT_CACHE
    """Where archives are downloaded and extracted."""
    out_options: dict = field(default_factory=dict)
    """fsspec storage options of the output root."""
    source_options: dict = field(default_factory=dict)
    """fsspec storage options of the source (and of ``vocab``)."""
    progress: bool = True
    """Show a progress bar."""
    overwrite: bool = False
    """Replace a corpus prepared at ``out`` with another vocabulary or tokenizer (else refused)."""

    def __post_init__(self) -> None:
        check_layout(self.sample_size, self.shard_size)
        self.spec.documents_for(self.text_docs)  # a text_docs with no meaning is refused
        check_tokenization(self.spec, self.tokenizer, self.vocab)
        if self.eos_token is not None and (not self.tokenizer or bpe_size(self.tokenizer)):
            raise ValueError(
                "--eos-token names a token of a --tokenizer FILE (bpe:N trains its own, "
                "<|endoftext|>)"
            )
        if self.bpe_sample_bytes < 1:
            raise ValueError(f"--bpe-sample-bytes {self.bpe_sample_bytes} must be at least 1")

    @property
    def spec(self) -> Dataset:
        """The dataset's definition."""
        return datasets.dataset(self.dataset)


def check_tokenization(spec: Dataset, tokenizer: str | None, vocab: str | None) -> None:
    """Refuse a subword tokenizer where a word vocabulary is built, and the reverse."""
    if spec.subword and not tokenizer:
        raise ValueError(
            f"--dataset {spec.name} needs --tokenizer FILE (a tokenizer.json) or bpe:N"
        )
    if tokenizer and not spec.subword:
        names = ", ".join(n for n, d in datasets.DATASETS.items() if d.subword)
        raise ValueError(f"--tokenizer applies to the record datasets ({names}), not {spec.name}")
    if tokenizer and vocab:
        raise ValueError("give --tokenizer or --vocab, not both")
    if tokenizer:
        bpe_size(tokenizer)  # a bpe:N without a usable N is refused


def check_layout(sample_size: int, shard_size: int) -> None:
    """Refuse samples that could not be cut (< 1 token) or would overflow a shard."""
    if not 1 <= sample_size <= shard_size:
        raise ValueError(
            f"--sample-size {sample_size} must be at least 1 and at most --shard-size "
            f"{shard_size} (a shard holds whole samples)"
        )
