"""txl-prepare --part I/N + --merge: byte-identical to one process, restartable, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_pipeline import prepare
from data_pipeline.cli import main
from tests.data_pipeline.conftest import SMALL, decoded_split, lm1b_reference, wikitext_reference

UNIT_BYTES = 150_000  # the test files are 0.5-1.3 MB: several units per split


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path -> bytes)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def cli(source: Path, out: Path, *extra: str) -> list[str]:
    """txl-prepare arguments matching SMALL, for the wikitext-2 files."""
    return [
        "--dataset", "wikitext-2", "--source", str(source), "--out", str(out), "--no-progress",
        "--sample-size", str(SMALL["sample_size"]), "--shard-size", str(SMALL["shard_size"]),
        "--unit-bytes", str(UNIT_BYTES), *extra,
    ]  # fmt: skip


def test_parts_and_merges_build_the_same_bytes_as_one_process(shared_data, tmp_path, capsys):
    source = shared_data / "wikitext-2"
    single = tmp_path / "single"
    manifests = prepare("wikitext-2", str(single), str(source), unit_bytes=UNIT_BYTES, **SMALL)
    for split, name in [("valid", "valid.txt"), ("test", "test.txt")]:
        assert decoded_split(single, split)[0] == wikitext_reference(source / name)
        assert manifests[split].documents == 60
    assert len({s.url.rsplit("-", 1)[0] for s in manifests["valid"].shards}) > 3  # units
    assert not (single / ".prepare").exists()

    parts = tmp_path / "parts"
    # No --vocab: the parts count, a merge builds the vocabulary, the parts encode, a merge
    # writes the manifests. Parts run in any order, with any number of workers.
    for step in ["3/3", "1/3", "2/3"]:
        assert main(cli(source, parts, "--part", step, "--workers", "2")) == 0
    assert "counted the words of" in capsys.readouterr().out
    assert not (parts / "valid").exists()
    assert main(cli(source, parts, "--merge")) == 0
    assert "vocabulary built" in capsys.readouterr().out
    for step in ["2/3", "3/3", "1/3"]:
        assert main(cli(source, parts, "--part", step, "--workers", "1")) == 0
    assert main(cli(source, parts, "--merge")) == 0
    assert "valid: 217646 tokens, 60 documents" in capsys.readouterr().out
    assert tree(parts) == tree(single)


def test_a_failed_part_is_rerun_alone(shared_data, tmp_path, capsys):
    path = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("<S>\n<UNK>\nthe\n,\n.\nof\n")
    args = ["--dataset", "lm1b", "--source", str(path), "--out", str(tmp_path / "out"),
            "--vocab", str(vocab_file), "--unit-bytes", "70000", "--no-progress",
            "--sample-size", "2000", "--shard-size", "10000"]  # fmt: skip
    assert main([*args, "--part", "1/2"]) == 0
    assert main([*args, "--part", "2/2"]) == 0
    capsys.readouterr()
    # What a part killed while encoding leaves: its last unit without a record, a shard cut.
    work = tmp_path / "out" / ".prepare" / "valid"
    records = sorted(work.glob("unit-*.json"))
    assert len(records) == 6  # 419 kB in units of 70 kB
    records[-1].unlink()
    cut = sorted((tmp_path / "out" / "valid").glob("valid-00005-*.tar"))[-1]
    cut.write_bytes(cut.read_bytes()[:1000])
    assert main([*args, "--merge"]) == 2
    assert "unit valid-00005 is not prepared yet" in capsys.readouterr().err
    others = set((tmp_path / "out" / "valid").glob("*.tar")) - set(cut.parent.glob("*-00005-*"))
    untouched = {p: p.stat().st_mtime_ns for p in others}
    assert main([*args, "--part", "1/2"]) == 0  # valid's units; 2/2 has test's
    assert "encoded 1 units (5 done before)" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched
    assert main([*args, "--merge"]) == 0
    expected = [w if w in ("<S>", "the", ",", ".", "of") else "<UNK>" for w in lm1b_reference(path)]
    assert decoded_split(tmp_path / "out", "valid")[0] == expected
    single = tmp_path / "single"
    prepare("lm1b", str(single), str(path), vocab=str(vocab_file), unit_bytes=70_000,
            sample_size=2000, shard_size=10_000, progress=False)  # fmt: skip
    assert tree(tmp_path / "out") == tree(single)


def test_merge_before_counting_names_the_missing_units(shared_data, tmp_path, capsys):
    source = shared_data / "wikitext-2"
    assert main(cli(source, tmp_path, "--part", "1/2")) == 0
    assert main(cli(source, tmp_path, "--merge")) == 2
    err = capsys.readouterr().err
    assert "not counted yet" in err and "test-00000" in err and "--part I/N" in err


@pytest.mark.parametrize("bad", ["0/2", "3/2", "2", "a/b"])
def test_bad_part_is_a_usage_error(tmp_path, bad, capsys):
    with pytest.raises(SystemExit):
        main(
            ["--dataset", "lm1b", "--source", str(tmp_path), "--out", str(tmp_path), "--part", bad]
        )
    assert "must be I/N" in capsys.readouterr().err
