"""enwik8-, text8- and PTB-shaped inputs built from the real WikiText text in ../shared/data,
packed as the official archives are (enwik8.zip and text8.zip with one member each, and
simple-examples.tgz)."""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from pathlib import Path

ENWIK8_TEST_CHARS = 200_000
TEXT8_TEST_CHARS = 100_000


def enwik8_bytes(shared: Path) -> bytes:
    """Raw bytes with CRLF line ends and UTF-8 beyond ASCII, as enwik8 has (XML, UTF-8)."""
    return (shared / "wikitext-2-raw" / "wiki.test.raw").read_bytes()


def text8_bytes(shared: Path) -> bytes:
    """As text8 was made (wikifil.pl): lower-cased letters, anything else one space, and the
    leading space the official file starts with."""
    text = (shared / "wikitext-2" / "test.txt").read_text(encoding="utf-8").lower()
    return (" " + re.sub(r"[^a-z]+", " ", text).strip()).encode("ascii")


def ptb_files(shared: Path) -> dict[str, bytes]:
    """PTB-shaped split files (also a WikiText-2 layout with a train split): WikiText-2 lines,
    valid.txt as train and test.txt cut in two."""
    test = (shared / "wikitext-2" / "test.txt").read_bytes().splitlines(keepends=True)
    return {
        "train": (shared / "wikitext-2" / "valid.txt").read_bytes(),
        "valid": b"".join(test[:1500]),
        "test": b"".join(test[1500:]),
    }


def write_zip(path: Path, member: str, data: bytes) -> Path:
    """One deflated member, like the official enwik8.zip and text8.zip."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, data)
    return path


def write_simple_examples(path: Path, files: dict[str, bytes]) -> Path:
    """``simple-examples.tgz``: ``./simple-examples/data/ptb.{split}.txt`` beside the
    character-level ``ptb.char.{split}.txt`` files (which a word-level ptb must not pick)."""
    with tarfile.open(path, "w:gz") as tf:
        for split, data in files.items():
            for name, body in ((f"ptb.{split}.txt", data), (f"ptb.char.{split}.txt", b"a _ b\n")):
                info = tarfile.TarInfo(f"./simple-examples/data/{name}")
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
    return path
