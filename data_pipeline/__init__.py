"""Corpora -> document-contiguous webdataset shards -> per-rank contiguous token streams.

The front door: what txl_dist (the engine and the commands) uses of the pipeline, by name.
Stage packages: ``corpora/`` (what txl-prepare knows of each dataset), ``prepare/`` (corpus ->
vocabulary, shards and manifests), ``shards/`` (the prepared data's format on storage),
``streams/`` (shards -> per-rank batches). Modules at the root, shared by the stages or the
package's command: ``cli.py`` and ``__main__.py`` (txl-prepare's command line), ``vocab.py``
and ``wordids.py`` (the word vocabulary), ``cache.py``, ``limits.py``, ``received.py`` (every
read of a received file) and ``redact.py``.

Public API::

    prepare(dataset, out, source=None, ...)      # txl-prepare as a function
    manifest_url(root, split)                    # ROOT/{split}/manifest.json
    TokenStreams(manifest_url, rows_per_rank, tgt_len, rank, world_size, seed, order, ...)
    MixedStreams(sources, rows_per_rank, tgt_len, ...), both a BatchStream
    Vocab.load(vocab_url(root)), Subword.load(url)
    DataError and its subclasses

See ``shards/format.py`` for the on-disk layout and ``streams/token_streams.py`` for the row
layout and state.
"""

from data_pipeline.corpora.datasets import DATASETS
from data_pipeline.corpora.subword import EOS_NAMES, TOKENIZER_FILE, Subword
from data_pipeline.prepare.job import prepare
from data_pipeline.prepare.verify import root_tokenizer, verify
from data_pipeline.redact import redact, redact_text
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
from data_pipeline.shards.storage import Retry, parse_options
from data_pipeline.streams import (
    IGNORE_INDEX,
    ORDERS,
    BatchStream,
    MixedStreams,
    MixSource,
    Reading,
    TextBatches,
    TokenStreams,
    check_same_vocabulary,
    check_vocab,
)
from data_pipeline.vocab import EOS, SENTENCE, Vocab

__all__ = [
    "DATASETS",
    "EOS",
    "EOS_NAMES",
    "IGNORE_INDEX",
    "ORDERS",
    "SENTENCE",
    "TOKENIZER_FILE",
    "BatchStream",
    "ChecksumError",
    "CorpusFormatError",
    "DataError",
    "Manifest",
    "ManifestError",
    "MixSource",
    "MixedStreams",
    "Reading",
    "Retry",
    "ShardCorruptError",
    "ShardMissingError",
    "ShardTruncatedError",
    "SourceUnreachableError",
    "Subword",
    "TextBatches",
    "TokenStreams",
    "Vocab",
    "VocabMismatchError",
    "check_same_vocabulary",
    "check_vocab",
    "load_manifest",
    "manifest_url",
    "parse_options",
    "prepare",
    "redact",
    "redact_text",
    "root_tokenizer",
    "verify",
    "vocab_url",
]
