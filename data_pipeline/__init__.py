"""Corpora -> document-contiguous webdataset shards -> per-rank contiguous token streams.

Public API::

    prepare(dataset, out, source=None, ...)      # txl-prepare as a function (data_pipeline.prepare)
    manifest_url(root, split)                    # ROOT/{split}/manifest.json
    TokenStreams(manifest_url, rows_per_rank, tgt_len, rank, world_size, seed, order, ...)
    Vocab.load(vocab_url(root))
    DataError and its subclasses

See ``shards.py`` for the on-disk layout and ``streams.py`` for the row layout and state.

Modules: corpora/ (corpus readers); prepare.py (the pipeline) and cli.py (its command line),
units.py, pieces.py, wordids.py, vocab.py and cache.py (its work and vocabulary); shards.py
(shards and manifests); streams.py, mixing.py and text_batches.py (training and evaluation
batches); storage.py (file systems with retries); errors.py, redact.py and limits.py (errors,
secrets and caps on untrusted input).
"""

from data_pipeline.errors import (
    ChecksumError,
    CorpusFormatError,
    DataError,
    ManifestError,
    ShardCorruptError,
    ShardMissingError,
    ShardTruncatedError,
    SourceUnreachableError,
    VocabMismatchError,
)
from data_pipeline.prepare import prepare
from data_pipeline.shards import Manifest, load_manifest, manifest_url, verify, vocab_url
from data_pipeline.streams import IGNORE_INDEX, TokenStreams
from data_pipeline.vocab import Vocab

__all__ = [
    "IGNORE_INDEX",
    "ChecksumError",
    "CorpusFormatError",
    "DataError",
    "Manifest",
    "ManifestError",
    "ShardCorruptError",
    "ShardMissingError",
    "ShardTruncatedError",
    "SourceUnreachableError",
    "TokenStreams",
    "Vocab",
    "VocabMismatchError",
    "load_manifest",
    "manifest_url",
    "prepare",
    "verify",
    "vocab_url",
]
