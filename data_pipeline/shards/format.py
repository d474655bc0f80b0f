"""Shards and manifests: webdataset tar files of whole documents, indexed for ranged reads.

A prepared dataset at ``ROOT`` (any fsspec URL) looks like::

    ROOT/vocab.txt                      token<TAB>count, one line per id
    ROOT/{split}/manifest.json          see Manifest
    ROOT/{split}/{split}-000000.tar     webdataset shards, uncompressed
    ROOT/{split}/{split}-000001.tar ...

Each shard holds samples keyed ``NNNNNNNN`` with two members: ``lengths.npy`` (int32 token count
of each document in the sample) and ``tokens.npy`` (int32 token ids of those documents,
concatenated). A sample holds whole documents of at most ``sample_tokens`` tokens in all, except
that a longer document is cut into consecutive pieces (enwik8 and text8 are one document of ~90M
tokens): it starts a sample, each of its pieces but the last fills one, and its last piece opens
the sample that the next documents fill. A piece is an entry of ``lengths`` like a document;
``sample_continues[i]`` says that sample i's first entry continues the last entry of the sample
before it, so a reader needs only the samples its tokens lie in, and counts each document once.
A shard holds whole samples (a cut document may go on in the next shard). Tars are written with
a fixed mtime, so the same input gives byte-identical shards.

Because the tar is uncompressed, the manifest can point straight at the raw little-endian int32
payloads inside it: ``sample_offsets[i]`` is the byte offset of sample i's first token and
``lengths_offsets[i]`` that of its first document length. The lengths member precedes the tokens
member, so bytes ``[lengths_offsets[i], sample_offsets[i] + 4 * sample_tokens[i])`` are the whole
sample in one ranged read; ``sample_crc32[i]`` is the CRC-32 of exactly those byt"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from data_pipeline.shards.errors import (
    ManifestError,
    ShardMissingError,
    reading,
)
from data_pipeline.shards.storage import DEFAULT_RETRY, Retry, filesystem

# 2: documents longer than a sample are cut (sample_continues). Version 1 data has no cut
# document, so it reads as version 2 with sample_continues all 0 (its rerun re-prepares it).
# 3: version 2 whose every document ends with an end-of-document token, recorded as
# ``eos_token`` and ``eos_id`` (subword data); word and char data stay version 2.
FORMAT_VERSION = 2
EOS_FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
TOKEN_BYTES = 4
VOCAB_FILE = "vocab.txt"


def manifest_url(root: str, split: str) -> str:
    """URL of a split's manifest in a dataset prepared at ``root``."""
    return f"{root.rstrip('/')}/{split}/manifest.json"


def vocab_url(root: str) -> str:
    """URL of the vocabulary of a dataset prepared at ``root``."""
    return f"{root.rstrip('/')}/{VOCAB_FILE}"


@dataclass
class ShardInfo:
    """One shard file and the index of its samples."""

    url: str
    """Shard file name, relative to the manifest's directory."""
    bytes: int
    """Size of the shard file."""
    sha256: str
    """sha256 of the whole shard file, hex."""
    tokens: int
    """Tokens in the shard."""
    documents: int
    """Documents that start in the shard."""
    sample_tokens: list[int] = field(default_factory=list)
    """Tokens of each sample."""
    sample_documents: list[int] = field(default_factory=list)
    """Entries of each sample's lengths: its documents and pieces of cut documents."""
    sample_offsets: list[int] = field(default_factory=list)
    """Byte offset of each sample's int32 token payload inside the tar."""
    lengths_offsets: list[int] = field(default_factory=list)
    """Byte offset of each sample's int32 document-length payload inside the tar."""
    sample_crc32: list[int] = field(default_factory=list)
    """CRC-32 of each sample's bytes [lengths offset, end of tokens)."""
    sample_continues: list[int] = field(default_factory=list)
    """1 where a sample's first entry continues the document that ends the sample before it."""

    def sample_span(self, index: int) -> tuple[int, int]:
        """[start, end) of sample ``index``'s bytes in the shard file: lengths, then tokens."""
        return (
            self.lengths_offsets[index],
            self.sample_offsets[index] + TOKEN_BYTES * self.sample_tokens[index],
        )


@dataclass
class Manifest:
    """Everything a reader needs to find any token of a split with one ranged read."""

    format_version: int
    """Layout version of shards and manifest (FORMAT_VERSION)."""
    dataset: str
    """Dataset name given to txl-prepare."""
    split: str
    """train, valid or test."""
    vocab_size: int
    """Number of token ids."""
    vocab_sha256: str
    """Vocab.sha256 of the vocabulary the ids refer to."""
    tokens: int
    """Tokens in the split."""
    documents: int
    """Documents in the split."""
    oov_tokens: int
    """Corpus words mapped to the unknown token because the vocabulary lacks them."""
    fingerprint: str
    """Hash of the inputs and options that produced this split (for reuse on rerun)."""
    shards: list[ShardInfo]
    """Shards in corpus order."""
    level: str = "word"
    """``char``, ``word`` or ``subword``: what one token is (char-level losses read as bits per
    character); manifests written before this field are word-level, and subword data prepared
    before ``subword`` was recorded says ``word`` (its tokenizer.json tells it apart)."""
    tokenizer_sample_bytes: int | None = None
    """``--tokenizer bpe:N``: bytes of the train split's source the tokenizer was trained on (a
    sample spread evenly over it); None when the vocabulary was given or built from all of it."""
    eos_token: str | None = None
    """The token that ends every document (subword data, format 3): its last token; None: no
    such token (word and char data, and subword data prepared before format 3)."""
    eos_id: int | None = None
    """The id of ``eos_token``; None without one."""

    def to_json(self) -> str:
        """Serialized manifest (a manifest without ``eos_token`` as format 2 wrote it)."""
        raw = asdict(self)
        if self.eos_token is None:
            del raw["eos_token"], raw["eos_id"]
        return json.dumps(raw, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes, url: str) -> Manifest:
        """Parse a manifest, refusing unknown format versions."""
        try:
            raw = json.loads(text)
            version = raw.get("format_version")
            if version not in READABLE_VERSIONS:
                raise ManifestError(
                    f"{url}: format version {version}, this reader understands "
                    f"{', '.join(map(str, READABLE_VERSIONS))}; re-run txl-prepare"
                )
            if version == 1:  # no document was cut
                for shard in raw["shards"]:
                    shard["sample_continues"] = [0] * len(shard["sample_tokens"])
            raw["shards"] = [ShardInfo(**s) for s in raw["shards"]]
            manifest = cls(**raw)
            check_manifest(manifest, url)
            return manifest
        except (ValueError, TypeError, KeyError, OverflowError) as err:  # 2**64: OverflowError
            raise ManifestError(f"{url} is not a valid manifest: {err}") from err


LEVELS = ("char", "word", "subword")
# A shard is a file beside its manifest: no scheme, no directory, no way up.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # the whole name: fullmatch
# Counts and offsets above this (256 TiB) are refused: their sums and products by TOKEN_BYTES
# stay far inside int64, where numpy would wrap silently.
MAX_COUNT = 1 << 48


def check_manifest(manifest: Manifest, url: str) -> None:
    """Refuse names that leave the manifest's directory and counts or offsets that do not add up.

    A manifest may come from a server someone else runs: everything a reader later indexes or
    allocates by is checked here, once, vectorised.
    """
    if manifest.level not in LEVELS:
        raise ManifestError(f"{url}: level {manifest.level!r} is not one of {', '.join(LEVELS)}")
    if manifest.vocab_size < 1 or manifest.tokens < 0 or manifest.documents < 0:
        raise ManifestError(f"{url}: vocab_size, tokens and documents must be positive counts")
    check_eos(manifest, url)
    for k, shard in enumerate(manifest.shards):
        _check_shard(shard, f"{url}: shard {k}")
    if manifest.shards and manifest.shards[0].sample_continues[:1] == [1]:
        raise ManifestError(f"{url}: its first sample continues a document before it")
    totals = [(s.tokens, s.documents) for s in manifest.shards]
    if tuple(map(sum, zip(*totals))) not in ((manifest.tokens, manifest.documents), ()):
        raise ManifestError(
            f"{url}: shards hold {sum(t for t, _ in totals)} tokens and "
            f"{sum(d for _, d in totals)} documents, the manifest says {manifest.tokens} and "
            f"{manifest.documents}"
        )


def check_eos(manifest: Manifest, url: str) -> None:
    """Refuse an end-of-document token without its id, or an id outside the vocabulary."""
    token, eos_id = manifest.eos_token, manifest.eos_id
    if token is None and eos_id is None:
        return
    if not (
        isinstance(token, str)
        and type(eos_id) is int
        and 0 <= eos_id < manifest.vocab_size
        and manifest.format_version == EOS_FORMAT_VERSION
    ):
        raise ManifestError(
            f"{url}: eos_token {str(token)[:40]!r} with eos_id {eos_id!r} is not a token of its "
            f"{manifest.vocab_size} ids in a format {EOS_FORMAT_VERSION} manifest; re-run "
            "txl-prepare"
        )


def _check_shard(shard: ShardInfo, where: str) -> None:
    if not isinstance(shard.url, str) or not PLAIN_NAME.fullmatch(shard.url):
        raise ManifestError(
            f"{where}: url {str(shard.url)[:80]!r} is not a plain file name beside the manifest"
        )
    where = f"{where} ({shard.url})"
    columns = (
        shard.sample_tokens,
        shard.sample_documents,
        shard.sample_offsets,
        shard.lengths_offsets,
        shard.sample_crc32,
        shard.sample_continues,
    )
    if len({len(c) for c in columns}) != 1:
        raise ManifestError(f"{where}: per-sample lists differ in length")
    tokens, docs, starts, lengths_at, crcs, cont = (np.asarray(c, np.int64) for c in columns)
    if not np.isin(cont, (0, 1)).all() or (cont > docs).any():
        raise ManifestError(f"{where}: sample_continues must be 0 or 1, and 0 without documents")
    counts = np.concatenate([[shard.bytes, shard.tokens, shard.documents], tokens, docs, crcs])
    if len(counts) and counts.min() < 0:
        raise ManifestError(f"{where}: negative count")
    if max(counts.max(initial=0), starts.max(initial=0), lengths_at.max(initial=0)) > MAX_COUNT:
        raise ManifestError(f"{where}: a count or offset over {MAX_COUNT}, more than any shard")
    ends = starts + TOKEN_BYTES * tokens
    # Each sample: its lengths, then its tokens, inside the file, after the previous sample.
    ok = (lengths_at >= 0) & (lengths_at + TOKEN_BYTES * docs <= starts) & (ends <= shard.bytes)
    ok[1:] &= lengths_at[1:] >= ends[:-1]
    if not ok.all():
        bad = int(np.argmin(ok))
        raise ManifestError(f"{where}: sample {bad}: offsets overlap or lie outside the shard")
    starting = docs.sum() - cont.sum()
    if tokens.sum() != shard.tokens or starting != shard.documents:
        raise ManifestError(
            f"{where}: samples hold {tokens.sum()} tokens and {starting} documents, the shard "
            f"says {shard.tokens} and {shard.documents}"
        )


def reading_prepared(what: str, url: str) -> contextlib.AbstractContextManager[None]:
    """``reading`` a shard or manifest: missing means txl-prepare has to (re)create it."""
    missing = ShardMissingError if what == "shard" else ManifestError
    return reading(what, url, missing, "; run txl-prepare to (re)create it")


def load_manifest(
    url: str, storage_options: dict | None = None, retry: Retry = DEFAULT_RETRY
) -> Manifest:
    """Read and parse a manifest (transient failures retried as ``retry`` says)."""
    with reading_prepared("manifest", url):
        # cat_file, not open(): fsspec's HTTP open() reports a refused connection as not found.
        # A ranged read (from 0 on), so HTTP's retries cover a body cut midway too (storage.py).
        fs, path = filesystem(url, storage_options, retry)
        data = fs.cat_file(path, start=0)
    return Manifest.from_json(data, url)


def shard_url(manifest_url_: str, shard: ShardInfo) -> str:
    """Absolute URL of a shard listed in the manifest at ``manifest_url_``."""
    return posixpath.join(posixpath.dirname(manifest_url_), shard.url)
