"""A corpus prepared with one vocabulary is not replaced by one of another unless asked."""

from __future__ import annotations

import json
from pathlib import Path

from data_pipeline.cli import main

WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dog", "ran", "after", "ball", "park"]


def records(src: Path, seed: int) -> Path:
    """Train and valid JSONL files of made-up sentences (a few kB), different for each seed."""
    for split, count in (("train", 300), ("valid", 30)):
        (src / split).mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps({"text": " ".join(WORDS[(i * seed + j) % len(WORDS)] for j in range(9))})
            for i in range(count)
        ]
        (src / split / "part.jsonl").write_text("\n".join(lines) + "\n")
    return src


def prepared(out: Path) -> dict[str, bytes]:
    """The prepared corpus's files (not txl-prepare's work records in .prepare/), by path."""
    files = [p.relative_to(out) for p in sorted(out.rglob("*")) if p.is_file()]
    return {p.as_posix(): (out / p).read_bytes() for p in files if not p.parts[0].startswith(".")}


def prepare(src: Path, out: Path, *options: str) -> int:
    args = ["--dataset", "jsonl", "--source", str(src), "--out", str(out), "--no-progress"]
    return main([*args, "--workers", "1", *options])


def test_another_tokenizer_is_refused_in_one_line_unless_overwrite(tmp_path, capsys):
    src, out = records(tmp_path / "src", 1), tmp_path / "out"
    assert prepare(src, out, "--tokenizer", "bpe:300") == 0
    before = prepared(out)
    capsys.readouterr()
    # Another tokenizer (trained: bpe:N), then one given as a file: both refused, nothing changed.
    other = tmp_path / "other"
    assert prepare(src, other, "--tokenizer", "bpe:280") == 0
    for tokenizer in ("bpe:280", str(other / "tokenizer.json")):
        assert prepare(src, out, "--tokenizer", tokenizer) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(
            f"txl-prepare: error: {out} holds a corpus prepared with another vocabulary "
            "(train/manifest.json: "
        ), err
        assert err.endswith(": choose another --out, or add --overwrite to replace it\n")
        assert prepared(out) == before
    # The same command goes on (reusing it all); --overwrite replaces.
    assert prepare(src, out, "--tokenizer", "bpe:300") == 0 and prepared(out) == before
    assert prepare(src, out, "--tokenizer", "bpe:280", "--overwrite") == 0
    assert prepared(out)["tokenizer.json"] == (other / "tokenizer.json").read_bytes()


def test_a_vocabulary_built_from_changed_text_is_refused(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "train").mkdir(parents=True)
    (src / "train" / "a.txt").write_text("one two three\n")
    assert (
        main(["--dataset", "text", "--source", str(src), "--out", str(out), "--no-progress"]) == 0
    )
    before = prepared(out)
    (src / "train" / "a.txt").write_text("four five six seven\n")
    assert (
        main(["--dataset", "text", "--source", str(src), "--out", str(out), "--no-progress"]) == 2
    )
    assert "holds a corpus prepared with another vocabulary" in capsys.readouterr().err
    assert prepared(out) == before
