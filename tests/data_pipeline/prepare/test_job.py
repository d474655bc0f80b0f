"""txl-prepare on the real corpora: exact reference tokens, documents, vocab, reuse, CLI."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from data_pipeline import ChecksumError, Vocab, load_manifest, manifest_url, prepare
from data_pipeline.cli import main
from data_pipeline.prepare.settings import Settings
from tests.data_pipeline.conftest import (
    SMALL,
    decoded_split,
    lm1b_reference,
    wikitext_reference,
)


def check_documents_whole(root: Path, split: str, documents: int) -> None:
    """Every sample's document lengths add up to its tokens; the manifest agrees with the tars."""
    manifest = load_manifest(manifest_url(str(root), split))
    _, lengths = decoded_split(root, split)
    sample_tokens = [n for shard in manifest.shards for n in shard.sample_tokens]
    assert [int(x.sum()) for x in lengths] == sample_tokens
    assert sum(len(x) for x in lengths) == manifest.documents == documents
    for shard in manifest.shards:
        assert shard.tokens == sum(shard.sample_tokens)
        assert shard.documents == sum(shard.sample_documents)


def test_wikitext103_valid_round_trip(shared_data, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "wiki.valid.tokens").symlink_to(shared_data / "wikitext-103" / "wiki.valid.tokens")
    manifests = prepare("wikitext-103", str(tmp_path / "out"), str(src), **SMALL)
    assert list(manifests) == ["valid"]
    tokens, _ = decoded_split(tmp_path / "out", "valid")
    assert len(tokens) == manifests["valid"].tokens == 217_646
    assert tokens == wikitext_reference(shared_data / "wikitext-103" / "wiki.valid.tokens")
    assert len(manifests["valid"].shards) > 1
    check_documents_whole(tmp_path / "out", "valid", 60)


def test_wikitext103_train_prefix_drops_cut_article(wt103, shared_data):
    tokens, _ = decoded_split(wt103, "train")
    reference = wikitext_reference(
        shared_data / "wikitext-103" / "wiki.train.tokens", drop_cut_last_article=True
    )
    assert tokens == reference
    assert reference[-1] == "<eos>"
    check_documents_whole(wt103, "train", 142)
    assert not (wt103 / "test").exists()


def test_vocab_is_reference_order_from_train(wt103, shared_data):
    reference = wikitext_reference(
        shared_data / "wikitext-103" / "wiki.train.tokens", drop_cut_last_article=True
    )
    # The reference: Counter over train, <eos> first, then most_common() (stable on ties).
    expected = ["<eos>"] + [w for w, _ in Counter(reference).most_common() if w != "<eos>"]
    vocab = Vocab.load(str(wt103 / "vocab.txt"))
    assert vocab.tokens == expected
    assert vocab.counts[:2] == [Counter(reference)["<eos>"], Counter(reference)[expected[1]]]


def test_valid_words_missing_from_train_vocab_become_unk(wt103, shared_data):
    vocab = Vocab.load(str(wt103 / "vocab.txt"))
    reference = wikitext_reference(shared_data / "wikitext-103" / "wiki.valid.tokens")
    expected = [w if w in vocab.index else "<unk>" for w in reference]
    tokens, _ = decoded_split(wt103, "valid")
    assert tokens == expected
    manifest = load_manifest(manifest_url(str(wt103), "valid"))
    assert manifest.oov_tokens == sum(w not in vocab.index for w in reference) > 0
    assert manifest.vocab_sha256 == vocab.sha256 and manifest.vocab_size == len(vocab)


def test_wikitext2_valid_and_test_round_trip(shared_data, tmp_path):
    manifests = prepare("wikitext-2", str(tmp_path), str(shared_data / "wikitext-2"), **SMALL)
    assert sorted(manifests) == ["test", "valid"]
    for split, name, n in [("valid", "valid.txt", 217_646), ("test", "test.txt", 245_569)]:
        tokens, _ = decoded_split(tmp_path, split)
        assert len(tokens) == n
        assert tokens == wikitext_reference(shared_data / "wikitext-2" / name)
        check_documents_whole(tmp_path, split, 60)


def test_lm1b_part1_round_trip(lm1b, shared_data):
    path = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    tokens, _ = decoded_split(lm1b, "valid")
    assert len(tokens) == 77_645 + 2 * 3_000
    assert tokens == lm1b_reference(path)
    check_documents_whole(lm1b, "valid", 3_000)
    vocab = Vocab.load(str(lm1b / "vocab.txt"))
    assert vocab.tokens[:2] == ["<S>", "<UNK>"]


def test_lm1b_given_vocab_maps_unknown_words(shared_data, tmp_path):
    vocab_file = tmp_path / "1b_word_vocab.txt"
    vocab_file.write_text("<S> 0\n</S> 0\n<UNK> 0\nthe 10\n, 5\n")
    path = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    prepare("lm1b", str(tmp_path / "out"), str(path), vocab=str(vocab_file), **SMALL)
    tokens, _ = decoded_split(tmp_path / "out", "test")
    assert tokens == [w if w in ("<S>", "the", ",") else "<UNK>" for w in lm1b_reference(path)]


def test_text_dataset_documents_are_blocks_or_files(tmp_path):
    src = tmp_path / "src"
    (src / "train").mkdir(parents=True)
    (src / "train" / "a.txt").write_text("one two\nthree\n\n\nfour five\n")
    (src / "train" / "b.txt").write_text("six\n  \nseven eight")
    blocks = prepare("text", str(tmp_path / "blocks"), str(src), **SMALL)
    tokens, lengths = decoded_split(tmp_path / "blocks", "train")
    expected = "one two <eos> three <eos> four five <eos> six <eos> seven eight <eos>"
    assert " ".join(tokens) == expected
    assert np.concatenate(lengths).tolist() == [5, 3, 2, 3] and blocks["train"].documents == 4
    files = prepare("text", str(tmp_path / "files"), str(src), text_docs="file", **SMALL)
    assert files["train"].documents == 2


def test_rerun_reuses_finished_splits_and_says_so_once_each(wt103, shared_data, caplog):
    tars = sorted((wt103 / "train").glob("*.tar")) + [wt103 / "valid" / "manifest.json"]
    before = [p.stat().st_mtime_ns for p in tars]
    with caplog.at_level(logging.INFO):
        manifests = prepare("wikitext-103", str(wt103), str(shared_data / "wikitext-103"), **SMALL)
    assert [p.stat().st_mtime_ns for p in tars] == before
    said = Counter(r.getMessage().split(":")[0] for r in caplog.records if "reusing" in r.message)
    assert said == {manifest_url(str(wt103), split): 1 for split in manifests}


def test_changed_options_rewrite(shared_data, tmp_path):
    src = shared_data / "wikitext-2" / "valid.txt"
    first = prepare("wikitext-2", str(tmp_path), str(src), **SMALL)["valid"]
    again = prepare("wikitext-2", str(tmp_path), str(src), **{**SMALL, "sample_size": 50_000})
    assert first.fingerprint != again["valid"].fingerprint
    assert len(again["valid"].shards[0].sample_tokens) < len(first.shards[0].sample_tokens)


def test_a_cut_shard_is_written_again_not_reused(shared_data, tmp_path, caplog):
    src = shared_data / "wikitext-2" / "valid.txt"
    first = prepare("wikitext-2", str(tmp_path), str(src), **SMALL)["valid"]
    shard = tmp_path / "valid" / first.shards[-1].url
    whole = shard.read_bytes()
    shard.write_bytes(whole[:1000])  # its manifest and its unit's record still list it whole
    with caplog.at_level(logging.INFO):
        again = prepare("wikitext-2", str(tmp_path), str(src), **SMALL)["valid"]
    assert not [r for r in caplog.records if "reusing" in r.getMessage()]
    assert shard.read_bytes() == whole and again == first


def test_cli_prepare_and_verify(shared_data, tmp_path, capsys):
    src = shared_data / "wikitext-2" / "test.txt"
    out = tmp_path / "cli"
    assert main(["--dataset", "wikitext-2", "--source", str(src), "--out", str(out),
                 "--workers", "2", "--no-progress"]) == 0  # fmt: skip
    assert "test: 245569 tokens, 60 documents" in capsys.readouterr().out
    tokens, _ = decoded_split(out, "test")
    assert tokens == wikitext_reference(src)
    assert main(["--verify", str(out)]) == 0
    assert "245569 tokens OK" in capsys.readouterr().out


def wikitext_zip(shared_data: Path) -> bytes:
    """An archive laid out like the official wikitext-103-v1.zip (valid file only)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.write(
            shared_data / "wikitext-103" / "wiki.valid.tokens", "wikitext-103/wiki.valid.tokens"
        )
    return buf.getvalue()


def test_download_checks_checksum_and_extracts(shared_data, tmp_path, http_server):
    served = tmp_path / "served"
    served.mkdir()
    data = wikitext_zip(shared_data)
    (served / "wikitext-103-v1.zip").write_bytes(data)
    server = http_server(served)
    url = f"{server.url}/wikitext-103-v1.zip"
    with pytest.raises(ChecksumError, match="wikitext-103-v1.zip: sha256"):
        prepare("wikitext-103", str(tmp_path / "bad"), url, source_checksum="sha256:" + "0" * 64,
                cache_dir=str(tmp_path / "cache1"), **SMALL)  # fmt: skip
    good = "sha256:" + hashlib.sha256(data).hexdigest()
    manifests = prepare("wikitext-103", str(tmp_path / "out"), url, source_checksum=good,
                        cache_dir=str(tmp_path / "cache2"), **SMALL)  # fmt: skip
    assert manifests["valid"].tokens == 217_646 and manifests["valid"].documents == 60
    assert any(line.startswith("GET /wikitext-103-v1.zip") for line in server.requests())


def test_manifest_records_offsets_for_one_ranged_read(wt103):
    manifest = json.loads((wt103 / "valid" / "manifest.json").read_text())
    shard = manifest["shards"][1]
    raw = (wt103 / "valid" / shard["url"]).read_bytes()
    assert len(raw) == shard["bytes"]
    start, n = shard["sample_offsets"][0], shard["sample_tokens"][0]
    tokens, _ = decoded_split(wt103, "valid")
    first = sum(manifest["shards"][0]["sample_tokens"])
    vocab = Vocab.load(str(wt103 / "vocab.txt"))
    ids = np.frombuffer(raw[start : start + 4 * n], "<i4")
    assert vocab.decode(ids) == tokens[first : first + n]


# Pieces shorter than many lines, in this process; and ~120 pieces through a pool of two
# workers, whose results come back in order (thousands of tiny pieces there cost seconds of IPC).
@pytest.mark.parametrize("piece_bytes, workers", [(997, 1), (20_000, 2)])
def test_small_pieces_give_the_same_tokens_and_documents(
    shared_data, tmp_path, piece_bytes, workers
):
    wt2 = prepare("wikitext-2", str(tmp_path / "wt2"), str(shared_data / "wikitext-2"),
                  workers=workers, piece_bytes=piece_bytes, **SMALL)  # fmt: skip
    tokens, _ = decoded_split(tmp_path / "wt2", "valid")
    assert tokens == wikitext_reference(shared_data / "wikitext-2" / "valid.txt")
    assert wt2["valid"].documents == wt2["test"].documents == 60
    lm1b_file = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    lm = prepare("lm1b", str(tmp_path / "lm"), str(lm1b_file), min_count=1,
                 piece_bytes=piece_bytes, **SMALL)  # fmt: skip
    assert decoded_split(tmp_path / "lm", "valid")[0] == lm1b_reference(lm1b_file)
    assert lm["valid"].documents == 3_000


def test_crlf_and_unicode_whitespace_tokenize_like_python_str_split(tmp_path):
    text = " \r\n = Title = \r\n \r\n a\u00a0b  c\u2028d\r\n\r\n e\x1cf \r\n"
    (tmp_path / "wiki.train.tokens").write_bytes(text.encode())
    prepare("wikitext-2", str(tmp_path / "out"), str(tmp_path / "wiki.train.tokens"), **SMALL)
    tokens, lengths = decoded_split(tmp_path / "out", "train")
    lines = text.replace("\r\n", "\n").split("\n")[:-1]
    assert tokens == [t for line in lines for t in line.split() + ["<eos>"]]
    assert tokens[6:9] == ["a", "b", "c"]


def test_small_pieces_of_a_cut_file_and_of_text_blocks(shared_data, tmp_path, wt103):
    prepare("wikitext-103", str(tmp_path / "wt"), str(shared_data / "wikitext-103"),
            piece_bytes=50_000, **SMALL)  # fmt: skip
    assert decoded_split(tmp_path / "wt", "train")[0] == decoded_split(wt103, "train")[0]
    src = tmp_path / "train.txt"
    src.write_text("a b\nc\n\n \nd\n\n\ne f g\nh\n")
    prepare("text", str(tmp_path / "tx"), str(src), piece_bytes=3, **SMALL)
    tokens, lengths = decoded_split(tmp_path / "tx", "train")
    assert " ".join(tokens) == "a b <eos> c <eos> d <eos> e f g <eos> h <eos>"
    assert np.concatenate(lengths).tolist() == [5, 2, 6]


def test_settings_are_checked_once_before_anything_is_read(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match="text_docs must be 'block' or 'file', not 'lines'"):
        Settings("text", out, text_docs="lines")
    with pytest.raises(ValueError, match="unknown dataset 'wikitext-4'; choose one of"):
        Settings("wikitext-4", out)
    with pytest.raises(ValueError, match="--sample-size 10 must be at least 1 and at most --shard"):
        Settings("text", out, sample_size=10, shard_size=5)
    assert not list(tmp_path.iterdir())
