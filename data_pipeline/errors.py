"""Errors of the data pipeline: each names the file (and sample) at fault and what to do about it.

Nothing in the pipeline skips bad data silently: a read that cannot be trusted raises one of these.
"""

from __future__ import annotations


class DataError(Exception):
    """Base class of every data pipeline error."""


class SourceUnreachableError(DataError):
    """A URL (corpus source, manifest or shard) could not be reached or read."""


class ChecksumError(DataError):
    """A file's sha256 (or the download checksum of a source archive) does not match."""


class ManifestError(DataError):
    """A manifest is missing, unreadable or of an unknown format version."""


class ShardMissingError(DataError):
    """A shard listed in a manifest does not exist."""


class ShardCorruptError(DataError):
    """A shard's bytes do not match what the manifest says (size, checksum or layout)."""


class ShardTruncatedError(ShardCorruptError):
    """A shard is shorter than the manifest says: a read came back short."""


class VocabMismatchError(DataError):
    """The prepared data's vocabulary does not match the model's or the dataset's vocabulary."""


class CorpusFormatError(DataError):
    """A corpus file does not have the layout its dataset requires."""
