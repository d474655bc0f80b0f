"""enwik8, text8 and PTB: official archives over loopback HTTP, or --source as the archive or
the unpacked file, token-exact with the reference's preparation on the same inputs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile

import pytest

from data_pipeline.cli import main
from data_pipeline.corpora.datasets import DATASETS, Download
from data_pipeline.prepare.job import prepare
from data_pipeline.shards.errors import ChecksumError, CorpusFormatError, ManifestError
from data_pipeline.shards.format import FORMAT_VERSION, Manifest
from data_pipeline.vocab import Vocab

from . import paper_inputs as pi
from .conftest import decoded_split

# Facts from the reference on the same inputs (paper_inputs.py): salesforce/awd-lstm-lm
# data/enwik8/prep_enwik8.py and kimiyoung/transformer-xl prep_text8.py run on the zips with
# num_test_chars set to ENWIK8_TEST_CHARS / TEXT8_TEST_CHARS, then transformer-xl
# pytorch/data_utils.Corpus(dir, "enwik8" | "text8"), and Corpus(dir, "ptb", special=["<eos>"],
# lower_case=True) on the PTB files (as its get_lm_corpus does), torch 2.13 CPU. Per split:
# tokens, first 3, last 3, sha256 prefix of the tokens joined by spaces.
REFERENCE = {
    "enwik8": {
        "vocab": (178, ["32", "101", "116", "97", "110", "105", "111", "114"]),
        "train": (888690, ["32", "61", "32"], ["97", "115", "32"], "4aca14d64f447b07"),
        "valid": (199497, ["97", "32", "115"], ["115", "105", "111"], "d89f86ce28589ec3"),
        "test": (199469, ["110", "115", "32"], ["46", "32", "13"], "e98380d92835c5ec"),
    },
    "text8": {
        "vocab": (27, ["_", "e", "t", "n", "a", "i", "o", "r"]),
        "train": (910899, ["r", "o", "b"], ["t", "_", "t"], "4478cc003eeac9e8"),
        "valid": (100000, ["h", "e", "_"], ["b", "u", "i"], "dfa781684c28194a"),
        "test": (100000, ["l", "d", "_"], ["u", "n", "k"], "a7356caf98c564a1"),
    },
    "ptb": {
        "vocab": (15936, ["<eos>", "the", "<unk>", ",", ".", "of", "and", "in"]),
        "train": (
            217646,
            ["<eos>", "=", "homarus"],
            ["<eos>", "<eos>", "<eos>"],
            "4cd9aac9d4aab665",
        ),
        "valid": (87104, ["<eos>", "=", "robert"], ["27", ".", "<eos>"], "602799570701773b"),
        "test": (158465, ["the", "scope", "of"], [".", "<eos>", "<eos>"], "029ed501b7ca1575"),
    },
    # The same files as WikiText-2 (train.txt, valid.txt, test.txt): Corpus(dir, "wt2",
    # special=["<eos>"], lower_case=False).
    "wikitext-2": {
        "vocab": (18328, ["<eos>", "<unk>", "the", ",", ".", "of", "and", "to"]),
        "train": (
            217646,
            ["<eos>", "=", "Homarus"],
            ["<eos>", "<eos>", "<eos>"],
            "e163383e62f6a4d2",
        ),
        "valid": (87104, ["<eos>", "=", "Robert"], ["27", ".", "<eos>"], "6131ba7b963b3bbe"),
        "test": (158465, ["The", "scope", "of"], [".", "<eos>", "<eos>"], "13e9689cf0e93833"),
    },
}
TEST_CHARS = {"enwik8": pi.ENWIK8_TEST_CHARS, "text8": pi.TEXT8_TEST_CHARS, "ptb": 0}
SMALL = {"sample_size": 1 << 20, "shard_size": 1 << 20, "progress": False}


def assert_reference(root, dataset: str) -> None:
    """The prepared vocabulary and every split's tokens are the reference's."""
    expected = REFERENCE[dataset]
    vocab = Vocab.load(str(root / "vocab.txt"))
    assert (len(vocab), vocab.tokens[:8]) == expected["vocab"]
    for split in ("train", "valid", "test"):
        tokens, _ = decoded_split(root, split)
        digest = hashlib.sha256(" ".join(tokens).encode()).hexdigest()[:16]
        assert (len(tokens), tokens[:3], tokens[-3:], digest) == expected[split], split
        manifest = json.loads((root / split / "manifest.json").read_text())
        assert manifest["level"] == ("char" if dataset in ("enwik8", "text8") else "word")
        if dataset != "wikitext-2":  # one document per split (the reference's single stream)
            assert manifest["documents"] == 1, split


def official_archive(tmp_path, shared_data, dataset: str):
    """The dataset's official archive, built from shared text, in tmp_path/served."""
    served = tmp_path / "served"
    served.mkdir()
    if dataset == "ptb":
        return pi.write_simple_examples(served / "simple-examples.tgz", pi.ptb_files(shared_data))
    data = pi.enwik8_bytes(shared_data) if dataset == "enwik8" else pi.text8_bytes(shared_data)
    return pi.write_zip(served / f"{dataset}.zip", dataset, data)


def serve_as_official(monkeypatch, http_server, archive, size: int | None = None) -> None:
    """Point the dataset's official download at a loopback server holding ``archive``."""
    dataset = {"enwik8.zip": "enwik8", "text8.zip": "text8"}.get(archive.name, "ptb")
    url = f"{http_server(archive.parent).url}/{archive.name}"
    size = archive.stat().st_size if size is None else size
    official = Download(url, None, None, size)
    monkeypatch.setitem(
        DATASETS, dataset, dataclasses.replace(DATASETS[dataset], official=official)
    )


@pytest.mark.parametrize("dataset", ["enwik8", "text8", "ptb"])
def test_official_download_over_loopback_is_token_exact(
    dataset, tmp_path, shared_data, http_server, monkeypatch
):
    archive = official_archive(tmp_path, shared_data, dataset)
    serve_as_official(monkeypatch, http_server, archive)
    out = tmp_path / "out"
    prepare(
        dataset, str(out), test_chars=TEST_CHARS[dataset], cache_dir=str(tmp_path / "c"), **SMALL
    )
    assert_reference(out, dataset)


@pytest.mark.parametrize("dataset", ["enwik8", "text8"])
def test_the_unpacked_file_as_source_gives_the_same_tokens(dataset, tmp_path, shared_data):
    archive = official_archive(tmp_path, shared_data, dataset)
    unpacked = tmp_path / dataset
    with zipfile.ZipFile(archive) as zf:
        unpacked.write_bytes(zf.read(dataset))
    out = tmp_path / "out"
    code = main(
        ["--dataset", dataset, "--source", str(unpacked), "--out", str(out), "--workers", "2",
         "--test-chars", str(TEST_CHARS[dataset]), "--cache-dir", str(tmp_path / "c"),
         "--no-progress"]
    )  # fmt: skip
    assert code == 0
    assert_reference(out, dataset)
    assert main(["--verify", str(out)]) == 0


def test_ptb_from_its_files_in_a_directory_is_token_exact(tmp_path, shared_data):
    src = tmp_path / "penn"
    src.mkdir()
    for split, data in pi.ptb_files(shared_data).items():
        (src / f"ptb.{split}.txt").write_bytes(data)
        (src / f"ptb.char.{split}.txt").write_bytes(b"a _ b\n")
    prepare("ptb", str(tmp_path / "out"), str(src), cache_dir=str(tmp_path / "c"), **SMALL)
    assert_reference(tmp_path / "out", "ptb")


def test_wikitext2_vocabulary_counts_all_three_splits_as_the_reference(tmp_path, shared_data):
    src = tmp_path / "wt2"
    src.mkdir()
    for split, data in pi.ptb_files(shared_data).items():
        (src / f"{split}.txt").write_bytes(data)
    prepare("wikitext-2", str(tmp_path / "out"), str(src), cache_dir=str(tmp_path / "c"), **SMALL)
    assert_reference(tmp_path / "out", "wikitext-2")


def test_an_official_download_of_the_wrong_size_is_a_one_line_error(
    tmp_path, shared_data, http_server, monkeypatch
):
    archive = official_archive(tmp_path, shared_data, "text8")
    serve_as_official(monkeypatch, http_server, archive, size=31_344_016)
    with pytest.raises(
        ChecksumError, match=r"text8\.zip: \d+ bytes, the official file has 31344016"
    ):
        prepare("text8", str(tmp_path / "out"), cache_dir=str(tmp_path / "c"), **SMALL)


def test_a_corpus_shorter_than_valid_and_test_is_a_one_line_error(tmp_path, shared_data):
    archive = official_archive(tmp_path, shared_data, "enwik8")
    with pytest.raises(CorpusFormatError, match=r"enwik8\.zip: 1290547 bytes, but valid and test"):
        prepare("enwik8", str(tmp_path / "out"), str(archive), test_chars=700_000,
                cache_dir=str(tmp_path / "c"), **SMALL)  # fmt: skip


def test_a_zip_without_the_corpus_member_is_a_one_line_error(tmp_path):
    archive = pi.write_zip(tmp_path / "enwik8.zip", "enwik9", b"x" * 100)
    with pytest.raises(CorpusFormatError, match=r"enwik8\.zip: no member named 'enwik8'"):
        prepare("enwik8", str(tmp_path / "out"), str(archive), test_chars=10,
                cache_dir=str(tmp_path / "c"), **SMALL)  # fmt: skip


def test_a_directory_as_enwik8_source_is_a_one_line_error(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(CorpusFormatError, match=r"src is not a file; enwik8 comes as enwik8\.zip"):
        prepare("enwik8", str(tmp_path / "out"), str(tmp_path / "src"),
                cache_dir=str(tmp_path / "c"), **SMALL)  # fmt: skip


def test_text8_with_a_character_text8_lacks_names_file_and_byte(tmp_path):
    src = tmp_path / "text8"
    src.write_bytes(b" anarchism originated as a term" * 10 + b" Of abuse" + b" a" * 20)
    with pytest.raises(CorpusFormatError, match=r"train\.txt: byte 311 is b'O'; text8 holds only"):
        prepare("text8", str(tmp_path / "out"), str(src), test_chars=10,
                cache_dir=str(tmp_path / "c"), **SMALL)  # fmt: skip


def test_a_manifest_level_defaults_to_word_and_is_checked():
    raw = {"format_version": FORMAT_VERSION, "dataset": "wikitext-103", "split": "valid",
           "vocab_size": 3, "vocab_sha256": "x", "tokens": 0, "documents": 0, "oov_tokens": 0,
           "fingerprint": "f", "shards": []}  # fmt: skip
    assert Manifest.from_json(json.dumps(raw), "m.json").level == "word"
    with pytest.raises(
        ManifestError, match=r"m\.json: level 'byte' is not one of char, word, subword"
    ):
        Manifest.from_json(json.dumps({**raw, "level": "byte"}), "m.json")
