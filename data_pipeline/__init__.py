"""Corpora -> document-contiguous webdataset shards -> per-rank contiguous token streams.

Public API::

    prepare(dataset, out, source=None, ...)      # txl-prepare as a function (data_pipeline.prepare)
    manifest_url(root, split)                    # ROOT/{split}/manifest.json
    TokenStreams(manifest_url, rows_per_rank, tgt_len, rank, world_size, seed, order, ...)
    Vocab.load(vocab_url(root))
    DataError and its subclasses

See ``shards/format.py`` for the on-disk layout and ``streams/token_streams.py`` for the row
layout and state.
"""

from data_pipeline.prepare import prepare
from data_pipeline.shards.errors import (
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
from data_pipeline.shards.format import Manifest, load_manifest, manifest_url, vocab_url
from data_pipeline.streams.geometry import IGNORE_INDEX
from data_pipeline.streams.token_streams import TokenStreams
from data_pipeline.verify import verify
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
