"""Errors of the data pipeline: each names the file (and sample) at fault and what to do about it.

Nothing in the pipeline skips bad data silently: a read that cannot be trusted raises one of these.
Messages name URLs, so they pass through the redaction rule: credentials never show.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from data_pipeline.redact import redact_text


class DataError(Exception):
    """Base class of every data pipeline error; its message is redacted."""

    def __init__(self, message: str):
        super().__init__(redact_text(message))


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


@contextlib.contextmanager
def reading(
    what: str, url: str, missing: type[DataError] = SourceUnreachableError, hint: str = ""
) -> Iterator[None]:
    """A file system's errors while reading the ``what`` at ``url`` as one-line DataErrors.

    The cause is not chained: its text (fsspec's path, the client's message) can hold the URL's
    credentials, which a DataError's message redacts but a chained traceback would print.
    """
    try:
        yield
    except FileNotFoundError as err:
        if isinstance(err.__cause__, OSError):  # fsspec's HTTP reports a failed connection so
            raise SourceUnreachableError(
                f"{what} {url} could not be reached ({_failure(err.__cause__)}): check the "
                "network and the URL"
            ) from None
        raise missing(f"{what} {url} not found{hint}") from None
    except OSError as err:
        raise SourceUnreachableError(f"cannot read {what} {url}: {err}") from None


def _failure(cause: OSError) -> str:
    """Why a connection failed, in the system's words ("Connection refused")."""
    error = getattr(cause, "os_error", None) or cause  # aiohttp wraps the socket's error
    if isinstance(getattr(error, "errno", None), int) and error.errno > 0:
        return os.strerror(error.errno)
    return getattr(error, "strerror", None) or str(error)  # DNS: "Name or service not known"
