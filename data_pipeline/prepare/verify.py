"""A prepared dataset re-checked end to end (txl-prepare --verify), and the tokenizer a
record dataset's root keeps."""

from __future__ import annotations

import hashlib

import numpy as np

from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.shards.errors import (
    ChecksumError,
    DataError,
    ManifestError,
    ShardCorruptError,
    ShardTruncatedError,
    VocabMismatchError,
)
from data_pipeline.shards.format import (
    ShardInfo,
    load_manifest,
    manifest_url,
    reading_prepared,
    shard_url,
    vocab_url,
)
from data_pipeline.shards.samples import decode_sample
from data_pipeline.shards.storage import filesystem
from data_pipeline.vocab import Vocab


def root_tokenizer(root: str, storage_options: dict | None = None) -> Subword | None:
    """The subword tokenizer a record dataset prepared at ``root`` keeps (None for a word or
    character vocabulary)."""
    fs, root_path = filesystem(root, storage_options)
    if not fs.exists(f"{root_path}/{TOKENIZER_FILE}"):
        return None
    return Subword.load(f"{root.rstrip('/')}/{TOKENIZER_FILE}", storage_options)


def verify(root: str, storage_options: dict | None = None) -> list[str]:
    """Re-check a prepared dataset end to end; returns what was checked, raises on a problem."""
    fs, root_path = filesystem(root, storage_options)
    vocab: Subword | Vocab | None = root_tokenizer(root, storage_options)
    if vocab is None:
        vocab = Vocab.load(vocab_url(root), storage_options)
    splits = [s for s in ("train", "valid", "test") if fs.exists(f"{root_path}/{s}/manifest.json")]
    if not splits:
        raise ManifestError(f"no split manifests under {root}")
    return [verify_split(manifest_url(root, s), vocab, storage_options) for s in splits]


def verify_split(url: str, vocab: Vocab | Subword, storage_options: dict | None = None) -> str:
    """Check one split: vocab identity, every shard's size and sha256, every sample."""
    manifest = load_manifest(url, storage_options)
    if manifest.vocab_sha256 != vocab.sha256 or manifest.vocab_size != len(vocab):
        raise VocabMismatchError(
            f"{url} was prepared with another vocabulary ({manifest.vocab_size} tokens, "
            f"sha256 {manifest.vocab_sha256[:12]}) than vocab.txt ({len(vocab)}, "
            f"{vocab.sha256[:12]}); re-run txl-prepare"
        )
    eos = manifest.eos_id
    if (
        eos is not None
        and isinstance(vocab, Subword)
        and vocab.tokenizer.token_to_id(manifest.eos_token) != eos
    ):
        raise VocabMismatchError(
            f"{url}: eos_token {manifest.eos_token!r} is not id {eos} of {TOKENIZER_FILE}; "
            "re-run txl-prepare"
        )
    # Whether each shard's last entry goes on in the next shard (a cut document).
    goes_on = [bool(s.sample_continues[:1] == [1]) for s in manifest.shards[1:]] + [False]
    for shard, continued in zip(manifest.shards, goes_on):
        verify_shard(shard_url(url, shard), shard, len(vocab), storage_options, eos, continued)
    ends = "" if eos is None else f", each document ending with {manifest.eos_token!r}"
    return f"{url}: {len(manifest.shards)} shards, {manifest.tokens} tokens{ends} OK"


# Bytes per read while verifying: a shard is hashed as a stream, never held whole.
READ_BYTES = 1 << 20


def verify_shard(
    url: str, shard: ShardInfo, vocab_size: int, storage_options: dict | None,
    eos: int | None = None, continued: bool = False,
) -> None:  # fmt: skip
    """Size (asked first: the file may be anything, any size), then one pass over the bytes for
    the sha256 and each sample's checks (``eos``: every document's last token; ``continued``:
    its last document goes on in the next shard); a checksum mismatch names the first bad
    sample."""
    fs, path = filesystem(url, storage_options)
    with reading_prepared("shard", url):
        size = fs.size(path)
    if size != shard.bytes:
        raise (ShardTruncatedError if size < shard.bytes else ShardCorruptError)(
            f"{url}: {size} bytes, the manifest says {shard.bytes}; re-run txl-prepare"
        )
    # Over HTTP one plain GET read as a stream (no range support needed); elsewhere block reads.
    block_size = 0 if "http" in fs.protocol else READ_BYTES
    with (
        reading_prepared("shard", url),
        fs.open(path, "rb", block_size=block_size, cache_type="readahead") as f,
    ):
        digest, bad = scan_shard(f, shard, vocab_size, url, eos, continued)
    if digest != shard.sha256:
        damage = f"first bad sample: {bad}" if bad else "the samples pass: tar headers differ"
        raise ChecksumError(
            f"{url}: sha256 {digest} does not match the manifest's {shard.sha256}; {damage}"
        )
    if bad:
        raise bad


def scan_shard(
    f, shard: ShardInfo, vocab_size: int, url: str, eos: int | None = None,
    continued: bool = False,
) -> tuple[str, DataError | None]:  # fmt: skip
    """sha256 of a shard file object read front to back, and the first sample failing its checks.

    Memory: one read of READ_BYTES or one sample (samples lie in file order, as check_manifest
    made sure, so one pass sees each whole).
    """
    digest, pos, bad = hashlib.sha256(), 0, None

    def read(n: int) -> bytes:  # n bytes, fewer only at the end (a stream may return less)
        nonlocal pos
        parts = []
        while n > 0 and (part := f.read(n)):
            parts.append(part)
            n -= len(part)
        data = b"".join(parts)
        digest.update(data)
        pos += len(data)
        return data

    for i in range(len(shard.sample_tokens)):
        start, end = shard.sample_span(i)
        while pos < start and read(min(READ_BYTES, start - pos)):
            pass  # tar headers before the sample: hashed, not kept
        span = read(end - start)
        try:
            tokens, lengths = decode_sample(span, shard, i, url, vocab_size)
            if eos is not None:
                last = (
                    shard.sample_continues[i + 1] if i + 1 < len(shard.sample_tokens) else continued
                )
                check_ends(tokens, lengths[: len(lengths) - bool(last)], eos, f"{url}: sample {i}")
        except DataError as err:
            bad = bad or err
    while read(READ_BYTES):
        pass
    return digest.hexdigest(), bad


def check_ends(tokens: np.ndarray, lengths: np.ndarray, eos: int, where: str) -> None:
    """Refuse a document (an entry of ``lengths``) whose last token is not ``eos``."""
    ends = np.cumsum(lengths, dtype=np.int64) - 1
    bad = np.flatnonzero((lengths < 1) | (tokens[np.maximum(ends, 0)] != eos)) if len(ends) else []
    if len(bad):
        raise ShardCorruptError(
            f"{where}: document {int(bad[0])} does not end with the end-of-text token (id {eos}); "
            "re-run txl-prepare"
        )
