"""Shards written: documents packed into samples, samples into webdataset tars, each
indexed for ranged reads as it is written (format.py: the layout)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zlib
from dataclasses import dataclass

import numpy as np
import webdataset as wds

from data_pipeline.shards.format import ShardInfo


@dataclass
class Sample:
    """A sample on its way into a shard."""

    tokens: np.ndarray
    """int32 token ids."""
    lengths: np.ndarray
    """int32 length of each document or piece of a cut document."""
    continues: bool
    """The first entry continues the document that ends the sample before."""


class ShardSink:
    """Packs documents into samples of about ``sample_tokens`` and samples into shards."""

    def __init__(self, out_dir: str, split: str, sample_tokens: int, shard_tokens: int, fs):
        self.out_dir, self.split, self.fs = out_dir.rstrip("/"), split, fs
        self.sample_tokens, self.shard_tokens = sample_tokens, shard_tokens
        self.shards: list[ShardInfo] = []
        self.pending_tokens = np.zeros(0, np.int32)
        self.pending_lengths = np.zeros(0, np.int64)
        self.pending_continues = False  # pending's first entry is the rest of a cut document
        self.samples: list[Sample] = []
        self.samples_tokens = 0

    def add(self, tokens: np.ndarray, doc_lengths: np.ndarray) -> None:
        """Append whole documents; full samples are cut off as soon as possible."""
        tokens = tokens.astype(np.int32, copy=False)
        # Not copied when nothing is pending: a whole-file corpus comes as one big document.
        self.pending_tokens = (
            np.concatenate([self.pending_tokens, tokens]) if len(self.pending_tokens) else tokens
        )
        self.pending_lengths = np.concatenate([self.pending_lengths, doc_lengths])
        self.cut_samples(final=False)

    def cut_samples(self, final: bool) -> None:
        """Move full samples (or, if ``final``, everything) from pending into shards."""
        ends = np.cumsum(self.pending_lengths)
        start_doc, start_tok, size = 0, 0, self.sample_tokens
        while start_doc < len(ends) and (final or ends[-1] - start_tok >= size):
            stop = int(np.searchsorted(ends, start_tok + size, side="right"))  # docs that fit
            if stop > start_doc:
                end_tok, lengths = int(ends[stop - 1]), self.pending_lengths[start_doc:stop]
                self.add_sample(self.pending_tokens[start_tok:end_tok], lengths)
                self.pending_continues, start_doc, start_tok = False, stop, end_tok
            else:  # a document longer than a sample: its next piece fills one
                self.add_sample(self.pending_tokens[start_tok : start_tok + size], [size])
                self.pending_continues, start_tok = True, start_tok + size
                self.pending_lengths[start_doc] -= size  # ends keep their meaning
        self.pending_tokens = self.pending_tokens[start_tok:]
        self.pending_lengths = self.pending_lengths[start_doc:]

    def add_sample(self, tokens: np.ndarray, lengths) -> None:
        """Queue a sample, first closing the shard if the sample would overflow it."""
        if self.samples and self.samples_tokens + len(tokens) > self.shard_tokens:
            self.write_shard()
        self.samples.append(Sample(tokens, np.asarray(lengths, np.int32), self.pending_continues))
        self.samples_tokens += len(tokens)

    def write_shard(self) -> None:
        """Write the queued samples as the next shard tar and index it."""
        buf = io.BytesIO()
        with wds.TarWriter(buf, mtime=0) as tar:
            for i, sample in enumerate(self.samples):
                tar.write(
                    {
                        "__key__": f"{i:08d}",
                        "lengths.npy": sample.lengths,
                        "tokens.npy": sample.tokens,
                    }
                )
        data = buf.getvalue()
        name = f"{self.split}-{len(self.shards):06d}.tar"
        self.fs.pipe_file(f"{self.out_dir}/{name}", data)
        self.shards.append(index_shard(name, data, self.samples))
        self.samples, self.samples_tokens = [], 0

    def close(self) -> list[ShardInfo]:
        """Flush everything and return the shard index."""
        self.cut_samples(final=True)
        if self.samples:
            self.write_shard()
        return self.shards


def payload_offsets(data: bytes) -> list[int]:
    """Byte offset of the raw array inside every .npy member of a tar, in member order."""
    offsets = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            npy = io.BytesIO(data[member.offset_data : member.offset_data + 4096])
            version = np.lib.format.read_magic(npy)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(npy)
            else:
                np.lib.format.read_array_header_2_0(npy)
            offsets.append(member.offset_data + npy.tell())
    return offsets


def index_shard(name: str, data: bytes, samples: list[Sample]) -> ShardInfo:
    """ShardInfo of a freshly written shard: members alternate lengths, tokens per sample."""
    offsets = payload_offsets(data)
    lengths_offsets, token_offsets = offsets[0::2], offsets[1::2]
    sample_tokens = [len(s.tokens) for s in samples]
    continues = [int(s.continues) for s in samples]
    shard = ShardInfo(
        url=name,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        tokens=sum(sample_tokens),
        documents=sum(len(s.lengths) for s in samples) - sum(continues),
        sample_tokens=sample_tokens,
        sample_documents=[len(s.lengths) for s in samples],
        sample_offsets=token_offsets,
        lengths_offsets=lengths_offsets,
        sample_continues=continues,
    )
    shard.sample_crc32 = [
        zlib.crc32(data[slice(*shard.sample_span(i))]) for i in range(len(samples))
    ]
    return shard
