"""Documents longer than a sample (enwik8 and text8 are one ~90M-token document): cut into
consecutive samples, counted once, read by each rank only as far as its rows need."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import numpy as np
import pytest

from data_pipeline.cli import main
from data_pipeline.prepare.job import prepare
from data_pipeline.prepare.verify import verify
from data_pipeline.shards.errors import ManifestError
from data_pipeline.shards.format import FORMAT_VERSION, Manifest, load_manifest, manifest_url
from data_pipeline.shards.writer import ShardSink
from data_pipeline.streams.reading import Reading
from data_pipeline.streams.token_streams import TokenStreams

from . import paper_inputs as pi
from .conftest import decoded_split

SAMPLE, SHARD = 1 << 14, 1 << 16  # the train split (888,690 tokens) spans 55 samples, 14 shards


@pytest.fixture(scope="module")
def layouts(shared_data, tmp_path_factory) -> dict[str, Path]:
    """An enwik8-shaped corpus prepared with small samples ("cut") and with samples larger than
    its train document ("whole", the layout before documents were cut)."""
    tmp = tmp_path_factory.mktemp("long")
    source = tmp / "enwik8"
    source.write_bytes(pi.enwik8_bytes(shared_data))
    sizes = {"cut": (SAMPLE, SHARD), "whole": (1 << 21, 1 << 21)}
    for name, (sample, shard) in sizes.items():
        prepare("enwik8", str(tmp / name), str(source), sample_size=sample, shard_size=shard,
                test_chars=pi.ENWIK8_TEST_CHARS, cache_dir=str(tmp / "cache"), workers=1,
                progress=False)  # fmt: skip
    return {name: tmp / name for name in sizes}


def test_a_long_document_is_cut_into_consecutive_samples_and_counted_once(layouts):
    tokens, lengths = decoded_split(layouts["cut"], "train")
    whole, whole_lengths = decoded_split(layouts["whole"], "train")
    assert [len(x) for x in whole_lengths] == [1]  # one document, one sample
    assert tokens == whole  # the pieces, in order, are the document token for token
    manifest = load_manifest(manifest_url(str(layouts["cut"]), "train"))
    sizes = [n for s in manifest.shards for n in s.sample_tokens]
    assert len(sizes) == -(-len(tokens) // SAMPLE) and set(sizes[:-1]) == {SAMPLE}
    assert [x.tolist() for x in lengths] == [[n] for n in sizes]  # each sample one piece
    assert [c for s in manifest.shards for c in s.sample_continues] == [0] + [1] * (len(sizes) - 1)
    assert manifest.documents == 1 and manifest.tokens == len(tokens)
    assert len(manifest.shards) > 1 and all(s.tokens <= SHARD for s in manifest.shards)
    assert len(verify(str(layouts["cut"]))) == 3


def test_documents_around_a_cut_one_keep_whole_samples(shared_data, tmp_path):
    """Short documents fill samples as before; the long one starts a sample, fills the next ones,
    and its rest opens the sample the documents after it fill."""
    ids = np.frombuffer(pi.enwik8_bytes(shared_data), np.uint8).astype(np.int32)
    docs = [100, 5 * SAMPLE + 300, 30, SAMPLE - 200, 7]
    sink = ShardSink(str(tmp_path), "mixed", SAMPLE, SHARD, fsspec.filesystem("file"))
    sink.add(ids[: sum(docs[:2])], np.array(docs[:2]))
    sink.add(ids[sum(docs[:2]) : sum(docs)], np.array(docs[2:]))
    shards = sink.close()
    lengths = [x for s in shards for x in sample_lengths(tmp_path, s)]
    assert lengths == [[100]] + [[SAMPLE]] * 5 + [[300, 30], [SAMPLE - 200, 7]]
    assert [c for s in shards for c in s.sample_continues] == [0, 0, 1, 1, 1, 1, 1, 0]
    assert sum(s.documents for s in shards) == len(docs)
    read = np.concatenate([decoded_tokens(tmp_path, s) for s in shards])
    assert np.array_equal(read, ids[: sum(docs)])


def test_shuffle_never_breaks_a_cut_document(shared_data, tmp_path):
    """The long document's samples move as one and its pieces stay at their samples' ends, while
    the short documents around it are shuffled."""
    ids = np.frombuffer(pi.enwik8_bytes(shared_data), np.uint8).astype(np.int32)
    docs = np.array([100, 5 * SAMPLE + 300, 30, 40, 50, 60, SAMPLE - 500, 7])
    bounds = np.cumsum(docs)
    sink = ShardSink(str(tmp_path), "mixed", SAMPLE, SHARD, fsspec.filesystem("file"))
    sink.add(ids[: bounds[-1]], docs)
    shards = sink.close()
    manifest = Manifest(FORMAT_VERSION, "enwik8", "mixed", 256, "", int(bounds[-1]), len(docs),
                        0, "", shards)  # fmt: skip
    (tmp_path / "manifest.json").write_text(manifest.to_json())
    long_doc = ids[bounds[0] : bounds[1]]
    orders = set()
    for seed in range(4):
        stream = TokenStreams(str(tmp_path / "manifest.json"), 1, 1000, seed=seed,
                              order="shuffle", tail=True)  # fmt: skip
        inputs, targets = (np.concatenate([b[i][0].numpy() for b in stream]) for i in (0, 1))
        tokens = np.append(inputs[:1], targets[targets >= 0])
        assert sorted(tokens.tolist()) == sorted(ids[: bounds[-1]].tolist())
        windows = np.lib.stride_tricks.sliding_window_view(tokens, 64)
        at = np.flatnonzero((windows == long_doc[:64]).all(axis=1))
        assert len(at) == 1 and np.array_equal(tokens[at[0] : at[0] + len(long_doc)], long_doc)
        orders.add(tokens.tobytes())
    assert len(orders) > 1


def sample_lengths(root, shard) -> list[list[int]]:
    data = (root / shard.url).read_bytes()
    return [
        np.frombuffer(data, "<i4", n, lo).tolist()
        for lo, n in zip(shard.lengths_offsets, shard.sample_documents)
    ]


def decoded_tokens(root, shard) -> np.ndarray:
    data = (root / shard.url).read_bytes()
    return np.concatenate(
        [
            np.frombuffer(data, "<i4", n, at)
            for at, n in zip(shard.sample_offsets, shard.sample_tokens)
        ]
    )


def epoch(url: str, rank: int, order: str, **kw) -> list[np.ndarray]:
    """Every batch of one epoch of one of 2 ranks (2 rows of 64 each, blocks of 16 steps)."""
    stream = TokenStreams(url, 2, 64, rank, 2, seed=3, order=order, epochs=1,
                          reading=Reading(block_tokens=2 * 64 * 16), **kw)  # fmt: skip
    return [np.concatenate([x.numpy(), y[:, -1:].numpy()], axis=1) for x, y in stream]


@pytest.mark.parametrize("order", ["corpus", "shuffle"])
def test_two_ranks_get_the_same_batches_from_cut_and_whole_samples(layouts, order):
    """Shuffled, the one document's samples stay one chain in order: no break in the middle."""
    for rank in (0, 1):
        cut = epoch(manifest_url(str(layouts["cut"]), "train"), rank, order)
        whole = epoch(manifest_url(str(layouts["whole"]), "train"), rank, order)
        assert len(cut) == len(whole) > 100
        assert all(np.array_equal(a, b) for a, b in zip(cut, whole))


def test_a_rank_reads_only_the_samples_its_rows_need(layouts, http_server):
    """Over HTTP every ranged read is logged: each is at most a sample and the tar header after
    it (a row's block of 1,024 tokens lies in one or two samples; rows are 222k tokens apart),
    and over a whole epoch rank 0 reads its half of the split and little more, not all of it."""
    server = http_server(layouts["cut"])
    assert len(epoch(manifest_url(server.url, "train"), 0, "corpus")) > 100
    ranges = [r.split("bytes=")[1] for r in server.requests() if ".tar bytes=" in r]
    sizes = [int(b) - int(a) + 1 for a, b in (r.split("-") for r in ranges)]
    tokens = load_manifest(manifest_url(str(layouts["cut"]), "train")).tokens
    assert max(sizes) <= 4 * SAMPLE + 1024
    assert sum(sizes) <= 4 * (tokens // 2 + 2 * 2 * SAMPLE)


def test_version_1_manifests_still_read_and_unknown_versions_say_rerun(layouts):
    """Version 1 wrote no cut document: it reads as version 2 without continued samples."""
    url = manifest_url(str(layouts["whole"]), "train")
    raw = json.loads(Path(url).read_text())
    raw["format_version"] = 1
    for shard in raw["shards"]:
        del shard["sample_continues"]
    old = Manifest.from_json(json.dumps(raw), "old.json")
    assert old.shards[0].sample_continues == [0] and old.documents == 1
    raw["format_version"] = 4  # 3: version 2 with an end-of-document token (test_format.py)
    with pytest.raises(ManifestError, match=r"new\.json: format version 4, .* re-run txl-prepare"):
        Manifest.from_json(json.dumps(raw), "new.json")


@pytest.mark.parametrize("sample, shard", [(0, 100), (200, 100)])
def test_a_sample_size_that_cannot_be_cut_or_overflows_a_shard_is_a_usage_error(
    sample, shard, tmp_path, capsys
):
    argv = ["--dataset", "enwik8", "--out", str(tmp_path), "--sample-size", str(sample),
            "--shard-size", str(shard)]  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"--sample-size {sample} must be at least 1 and at most --shard-size {shard}" in (
        capsys.readouterr().err
    )
    with pytest.raises(ValueError, match="a shard holds whole samples"):
        prepare("enwik8", str(tmp_path), sample_size=sample, shard_size=shard)
