"""A split's samples flattened from its manifest: sizes, shards, byte ranges in the files."""

from data_pipeline.shards.format import load_manifest
from data_pipeline.shards.samples import decode_sample
from data_pipeline.streams.table import SampleTable


def test_every_sample_is_found_in_its_shard_by_its_byte_range(wt103_valid):
    manifest = load_manifest(wt103_valid)
    table = SampleTable(manifest, wt103_valid)
    assert len(table) == sum(len(s.sample_tokens) for s in manifest.shards) > 1
    assert table.tokens.sum() == manifest.tokens
    assert len(set(table.shard_of.tolist())) == len(manifest.shards) > 1
    for sample in (0, len(table) // 2, len(table) - 1):
        shard = table.shards[table.shard_of[sample]]
        start, end = table.byte_range(sample)
        with open(table.urls[table.shard_of[sample]], "rb") as f:
            f.seek(start)
            span = f.read(end - start)
        index = table.index_in_shard[sample]
        tokens, _ = decode_sample(span, shard, index, "shard", manifest.vocab_size)
        assert len(tokens) == table.tokens[sample]
    assert not table.continues.any()  # WikiText's articles fit in a sample: no cut document
    assert table.cut_ends(0) == (False, False)
