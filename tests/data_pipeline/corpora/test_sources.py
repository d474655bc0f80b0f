"""Sources and archives: cache entries per source URL, checked markers, caps and names first."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile

import pytest

from data_pipeline.corpora.datasets import DATASETS
from data_pipeline.corpora.sources import ArchiveLimits, extract, fetch, file_digest, split_files
from data_pipeline.corpora.splits import SPLITS
from data_pipeline.shards.errors import CorpusFormatError

WIKITEXT_103 = DATASETS["wikitext-103"]


def write_zip(path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_same_file_name_from_two_urls_gives_two_cache_entries(tmp_path, http_server):
    write_zip(tmp_path / "a" / "corpus.zip", {"wiki.valid.tokens": b"from a\n"})
    write_zip(tmp_path / "b" / "corpus.zip", {"wiki.valid.tokens": b"from b, longer\n"})
    server = http_server(tmp_path)
    cache = tmp_path / "cache"
    texts = []
    for where in ("a", "b"):
        local = fetch(f"{server.url}/{where}/corpus.zip", cache, None, {})
        texts.append((extract(local, cache, WIKITEXT_103) / "wiki.valid.tokens").read_bytes())
    assert texts == [b"from a\n", b"from b, longer\n"]


def test_a_planted_done_marker_is_not_trusted(tmp_path):
    archive = tmp_path / "src" / "corpus.zip"
    write_zip(archive, {"wiki.valid.tokens": b"real\n"})
    cache = tmp_path / "cache"
    target = extract(archive, cache, WIKITEXT_103)
    assert target.parent == cache  # never beside the source
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["corpus.zip"]
    (target / "wiki.valid.tokens").write_bytes(b"planted\n")
    (target / ".done").write_text("not the digest")
    again = extract(archive, cache, WIKITEXT_103)
    assert (again / "wiki.valid.tokens").read_bytes() == b"real\n"
    assert (again / ".done").read_text() == file_digest(archive)
    assert sorted(p.name for p in cache.iterdir()) == [target.name]  # no temporary left


def test_a_folder_planted_with_the_archives_public_digest_is_not_trusted(tmp_path):
    archive = tmp_path / "src" / "corpus.zip"
    write_zip(archive, {"wiki.valid.tokens": b"real\n"})
    target = extract(archive, tmp_path / "cache", WIKITEXT_103)
    planted = target / "wiki.valid.tokens"
    planted.write_bytes(b"planted\n")  # beside the genuine .done: the archive's sha256
    if os.getuid() == 0:
        os.chown(planted, 65534, 65534)  # another user's
    else:
        planted.chmod(0o666)  # anyone's to write
    again = extract(archive, tmp_path / "cache", WIKITEXT_103)
    assert (again / "wiki.valid.tokens").read_bytes() == b"real\n"


def test_a_bomb_is_refused_before_anything_is_written(tmp_path):
    archive = tmp_path / "bomb.zip"
    write_zip(archive, {"wiki.train.tokens": b"\0" * (4 << 20)})  # 4 MiB from a few KiB
    assert archive.stat().st_size < 64 << 10
    limits = ArchiveLimits(max_bytes=1 << 20, max_members=10)
    with pytest.raises(CorpusFormatError, match="4194304 bytes uncompressed; over the limit"):
        extract(archive, tmp_path / "cache", WIKITEXT_103, limits)
    write_zip(archive, {f"f{i}": b"x" for i in range(20)})
    with pytest.raises(CorpusFormatError, match="20 members"):
        extract(archive, tmp_path / "cache", WIKITEXT_103, limits)
    assert not list((tmp_path / "cache").rglob("f1")) and not list(tmp_path.rglob("*.tokens"))


def test_a_tar_of_many_headers_is_refused_while_it_is_read(tmp_path):
    members = io.BytesIO()
    with tarfile.open(fileobj=members, mode="w:gz") as tf:
        for i in range(5000):
            tf.addfile(tarfile.TarInfo(f"f{i}"))  # an empty header: 512 bytes from a few
    archive = tmp_path / "headers.tar.gz"
    # Cut short: an archive read to its end before counting fails on the cut instead.
    archive.write_bytes(members.getvalue()[: len(members.getvalue()) // 2])
    limits = ArchiveLimits(max_members=10)
    with pytest.raises(CorpusFormatError, match="more than 10 members, over the limit"):
        extract(archive, tmp_path / "cache", WIKITEXT_103, limits)


def damaged_zip(case: str) -> bytes:
    """A zip whose one split file has compression method 99, is encrypted, or holds bad data."""
    members = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if case == "corrupt" else zipfile.ZIP_STORED
    with zipfile.ZipFile(members, "w", method) as zf:
        zf.writestr("wiki.valid.tokens", b"real text " * 100)
    data = bytearray(members.getvalue())
    local, central = data.index(b"PK\x03\x04"), data.index(b"PK\x01\x02")
    if case == "method 99":
        data[local + 8], data[central + 10] = 99, 99
    elif case == "encrypted":  # bit 0 of the flags
        data[local + 6] |= 1
        data[central + 8] |= 1
    else:  # the first deflate block's bytes, after the local header and the name
        start = local + 30 + len("wiki.valid.tokens")
        data[start : start + 4] = b"\xff" * 4
    return bytes(data)


@pytest.mark.parametrize(
    "case, reason",
    [
        ("method 99", "compression method is not supported"),
        ("encrypted", "is encrypted"),
        ("corrupt", "while decompressing data"),
        ("300-character name", "File name too long"),
    ],
)
def test_a_damaged_or_unusual_archive_is_a_one_line_error(tmp_path, case, reason):
    if case == "300-character name":
        archive = tmp_path / "long.tar"
        with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tf:
            member = tarfile.TarInfo("d" * 300 + "/wiki.valid.tokens")
            member.size = 3
            tf.addfile(member, io.BytesIO(b"abc"))
    else:
        archive = tmp_path / "damaged.zip"
        archive.write_bytes(damaged_zip(case))
    with pytest.raises(CorpusFormatError, match=f"cannot extract: .*{reason}") as err:
        extract(archive, tmp_path / "cache", WIKITEXT_103)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_member_outside_the_archive_is_a_one_line_error(tmp_path, kind):
    if kind == "zip":
        archive = tmp_path / "evil.zip"
        write_zip(archive, {"../evil.txt": b"x"})
    else:
        archive = tmp_path / "evil.tar"
        with tarfile.open(archive, "w") as tf:
            info = tarfile.TarInfo("/tmp/evil.txt")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(CorpusFormatError, match="points outside the archive") as err:
        extract(archive, tmp_path / "cache", WIKITEXT_103)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "evil.txt").exists()


def test_links_in_a_tar_are_not_extracted(tmp_path):
    archive = tmp_path / "links.tar"
    with tarfile.open(archive, "w") as tf:
        link = tarfile.TarInfo("wiki.train.tokens")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
        valid = tarfile.TarInfo("wiki.valid.tokens")
        valid.size = 5
        tf.addfile(valid, io.BytesIO(b"real\n"))
    target = extract(archive, tmp_path / "cache", WIKITEXT_103)
    assert not (target / "wiki.train.tokens").exists()
    assert (target / "wiki.valid.tokens").read_bytes() == b"real\n"


def extracted(target) -> set[str]:
    return {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()}


def test_only_the_split_files_of_a_zip_are_extracted(tmp_path):
    splits = {f"wikitext-103/wiki.{s}.tokens": f"{s} text\n".encode() for s in SPLITS}
    extras = {
        "wikitext-103/README.txt": b"readme\n",
        "wikitext-103/wiki.train.raw": b"raw text\n",
        "other/big.bin": b"\0" * (2 << 20),  # over the byte cap, but never written
    }
    archive = tmp_path / "wikitext-103-v1.zip"
    write_zip(archive, {**extras, **splits})
    target = extract(archive, tmp_path / "cache", WIKITEXT_103, ArchiveLimits(1 << 20, 10))
    assert extracted(target) == {*splits, ".done"}
    assert (target / "wikitext-103/wiki.test.tokens").read_bytes() == b"test text\n"
    assert split_files(WIKITEXT_103, str(target)) == {
        s: [f"file://{target}/wikitext-103/wiki.{s}.tokens"] for s in SPLITS
    }


def test_only_the_split_files_of_an_lm1b_tar_gz_are_extracted(tmp_path):
    top = "1-billion-word-language-modeling-benchmark-r13output"
    wanted = [
        f"{top}/training-monolingual.tokenized.shuffled/news.en-00001-of-00100",
        f"{top}/training-monolingual.tokenized.shuffled/news.en-00002-of-00100",
        f"{top}/heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050",
    ]
    extras = [
        f"{top}/README",
        f"{top}/heldout-monolingual.tokenized.shuffled/news.en.heldout-00001-of-00050",
        f"{top}/heldout-monolingual.tokenized.shuffled/.news.en-00003-of-00100.swp",
    ]
    archive = tmp_path / "lm1b.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        folder = tarfile.TarInfo(top)
        folder.type = tarfile.DIRTYPE
        tf.addfile(folder)
        for name in extras + wanted:
            info = tarfile.TarInfo(name)
            info.size = len(name) + 1
            tf.addfile(info, io.BytesIO(name.encode() + b"\n"))
    target = extract(archive, tmp_path / "cache", DATASETS["lm1b"])
    assert extracted(target) == {*wanted, ".done"}
    assert (target / wanted[0]).read_bytes() == wanted[0].encode() + b"\n"
    # The same archive read as another dataset is a cache entry of its own.
    other = extract(archive, tmp_path / "cache", DATASETS["text"])
    assert other != target and extracted(other) == {*wanted, *extras[:2], ".done"}


def test_an_archive_without_split_files_is_a_one_line_error(tmp_path):
    archive = tmp_path / "photos.zip"
    write_zip(archive, {"a.jpg": b"x", "b.jpg": b"y"})
    with pytest.raises(CorpusFormatError, match="none of its 2 members is a wikitext split file"):
        extract(archive, tmp_path / "cache", DATASETS["wikitext-2"])
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []
