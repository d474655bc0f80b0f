"""Archives: cache entries per source URL, checked markers, caps and names checked first."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from data_pipeline.corpora import ArchiveLimits, extract, fetch, file_digest
from data_pipeline.errors import CorpusFormatError


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
        texts.append((extract(local, cache) / "wiki.valid.tokens").read_bytes())
    assert texts == [b"from a\n", b"from b, longer\n"]


def test_a_planted_done_marker_is_not_trusted(tmp_path):
    archive = tmp_path / "src" / "corpus.zip"
    write_zip(archive, {"wiki.valid.tokens": b"real\n"})
    cache = tmp_path / "cache"
    target = extract(archive, cache)
    assert target.parent == cache  # never beside the source
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["corpus.zip"]
    (target / "wiki.valid.tokens").write_bytes(b"planted\n")
    (target / ".done").write_text("not the digest")
    again = extract(archive, cache)
    assert (again / "wiki.valid.tokens").read_bytes() == b"real\n"
    assert (again / ".done").read_text() == file_digest(archive)
    assert sorted(p.name for p in cache.iterdir()) == [target.name]  # no temporary left


def test_a_bomb_is_refused_before_anything_is_written(tmp_path):
    archive = tmp_path / "bomb.zip"
    write_zip(archive, {"wiki.train.tokens": b"\0" * (4 << 20)})  # 4 MiB from a few KiB
    assert archive.stat().st_size < 64 << 10
    with pytest.raises(CorpusFormatError, match="4194304 bytes uncompressed; over the limit"):
        extract(archive, tmp_path / "cache", ArchiveLimits(max_bytes=1 << 20, max_members=10))
    write_zip(archive, {f"f{i}": b"x" for i in range(20)})
    with pytest.raises(CorpusFormatError, match="20 members"):
        extract(archive, tmp_path / "cache", ArchiveLimits(max_bytes=1 << 20, max_members=10))
    assert not list((tmp_path / "cache").rglob("f1")) and not list(tmp_path.rglob("*.tokens"))


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
        extract(archive, tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "evil.txt").exists()


def test_links_in_a_tar_are_not_extracted(tmp_path):
    archive = tmp_path / "links.tar"
    with tarfile.open(archive, "w") as tf:
        link = tarfile.TarInfo("wiki.valid.tokens")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
    target = extract(archive, tmp_path / "cache")
    assert not (target / "wiki.valid.tokens").exists()
