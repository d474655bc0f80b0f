"""Every kind of bad data raises a clear error naming the file and sample; nothing is skipped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from data_pipeline import (
    ChecksumError,
    DataError,
    ManifestError,
    Reading,
    ShardCorruptError,
    ShardMissingError,
    ShardTruncatedError,
    SourceUnreachableError,
    TokenStreams,
    VocabMismatchError,
    manifest_url,
    verify,
)
from data_pipeline.cli import main
from data_pipeline.shards.storage import Retry
from tests.conftest import REPO_ROOT
from tests.processes import run


def read_epoch(root) -> None:
    """Stream one whole epoch of the valid split (2 ranks' worth of rows on one rank)."""
    for _ in TokenStreams(
        manifest_url(str(root), "valid"), 4, 100, epochs=1, reading=Reading(block_tokens=3000)
    ):
        pass


def shard_and_sample(root, shard_no=1, sample=2) -> tuple:
    """Path of a valid shard and the byte offset of one sample's tokens in it."""
    manifest = json.loads((root / "valid" / "manifest.json").read_text())
    shard = manifest["shards"][shard_no]
    return root / "valid" / shard["url"], shard["sample_offsets"][sample], shard


def test_missing_shard(wt103_copy):
    path, _, _ = shard_and_sample(wt103_copy)
    path.unlink()
    with pytest.raises(
        ShardMissingError, match=r"valid-00000-000001\.tar: shard missing \(reading sample \d+\)"
    ):
        read_epoch(wt103_copy)
    with pytest.raises(ShardMissingError, match=r"valid-00000-000001\.tar not found"):
        verify(str(wt103_copy))


def test_truncated_shard(wt103_copy):
    path, offset, _ = shard_and_sample(wt103_copy)
    path.write_bytes(path.read_bytes()[: offset + 100])
    with pytest.raises(
        ShardTruncatedError, match=r"valid-00000-000001\.tar: sample \d+ is truncated"
    ):
        read_epoch(wt103_copy)
    with pytest.raises(ShardTruncatedError, match=r"valid-00000-000001\.tar"):
        verify(str(wt103_copy))


def test_corrupted_sample_and_sha256_mismatch(wt103_copy, capsys):
    path, offset, _ = shard_and_sample(wt103_copy)
    data = bytearray(path.read_bytes())
    data[offset + 40] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ShardCorruptError, match=r"valid-00000-000001\.tar: sample 2 is corrupt"):
        read_epoch(wt103_copy)
    with pytest.raises(
        ChecksumError, match=r"valid-00000-000001\.tar: sha256 .* first bad sample.*2"
    ):
        verify(str(wt103_copy))
    assert main(["--verify", str(wt103_copy)]) == 2
    assert "valid-00000-000001.tar" in capsys.readouterr().err


def test_manifest_for_another_vocabulary(wt103_copy):
    vocab = wt103_copy / "vocab.txt"
    vocab.write_text(vocab.read_text() + "zz-not-in-the-corpus\t0\n")
    with pytest.raises(VocabMismatchError, match=r"train/manifest.json was prepared with another"):
        verify(str(wt103_copy))


def test_model_vocab_size_mismatch(wt103):
    with pytest.raises(VocabMismatchError, match="the model has 10"):
        TokenStreams(manifest_url(str(wt103), "valid"), 2, 10, expected_vocab_size=10)


def test_unreachable_url(refused_url):
    url = f"{refused_url}/data/valid/manifest.json"
    with pytest.raises(SourceUnreachableError, match=f"cannot read manifest {url}"):
        TokenStreams(url, 2, 10, reading=Reading(retry=Retry(attempts=2, first_wait_s=0.01)))


def test_missing_manifest(tmp_path):
    with pytest.raises(ManifestError, match=r"nowhere/valid/manifest.json not found"):
        TokenStreams(manifest_url(str(tmp_path / "nowhere"), "valid"), 2, 10)


def test_too_small_split_for_the_rows(wt103):
    with pytest.raises(DataError, match="too few for 1000 rows"):
        TokenStreams(manifest_url(str(wt103), "valid"), 1000, 500)


def test_an_unreachable_source_is_not_called_missing(refused_url, tmp_path, capsys):
    source = f"{refused_url}/wikitext-103-v1.zip"
    argv = ["--dataset", "wikitext-103", "--source", source, "--out", str(tmp_path / "out")]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert f"source {source} could not be reached (Connection refused)" in err
    assert "not found" not in err


def test_the_official_download_without_network_suggests_a_local_source(tmp_path):
    # A network namespace of its own: no route anywhere, as on a machine without internet.
    argv = ["unshare", "--net", sys.executable, "-m", "data_pipeline"]
    argv += ["--dataset", "wikitext-103", "--out", str(tmp_path / "out"), "--no-progress"]
    proc = run(argv, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode != 0
    assert "could not be reached" in proc.stderr and "not found" not in proc.stderr
    assert "offline, pass --source with a local copy of the corpus" in proc.stderr


def no_text_sources(root: Path) -> dict[str, tuple[Path, str]]:
    """Sources without a token, and what txl-prepare finds in each."""
    (root / "empty").mkdir()
    (root / "empty" / "train.txt").touch()
    (root / "hidden").mkdir()
    (root / "hidden" / ".notes.txt").write_text("hidden files never count\n")
    (root / "blank.txt").write_text("\n \n\t\n")
    return {
        "empty file": (root / "empty" / "train.txt", "no document in 1 file"),
        "empty files": (root / "empty", "no document in 1 file"),
        "no text files": (root / "hidden", "no files"),
        "blank lines": (root / "blank.txt", "only blank lines"),
    }


@pytest.mark.parametrize("case", ["empty file", "empty files", "no text files", "blank lines"])
def test_a_source_without_text_is_refused(tmp_path, capsys, case):
    source, found = no_text_sources(tmp_path)[case]
    out = tmp_path / "out"
    argv = ["--dataset", "text", "--source", str(source), "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"txl-prepare: error: source {source} holds no text for the train split ({found}); "
        "point --source at the corpus's UTF-8 text files"
    )
    assert not list(out.glob("*/manifest.json"))  # no empty split to train on


def test_an_unreadable_vocabulary_url_is_one_line_without_its_credentials(
    refused_url, tmp_path, capsys
):
    (tmp_path / "train.txt").write_text("a b c\n")
    vocab = refused_url.replace("http://", "http://alice:PW-SECRET@") + "/v.txt?token=T-SECRET"
    argv = ["--dataset", "text", "--source", str(tmp_path / "train.txt"), "--vocab", vocab]
    assert main([*argv, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("txl-prepare: error: vocabulary http://") and err.count("\n") == 1
    assert "SECRET" not in err, err
