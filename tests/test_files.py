"""Files and directories made in run directories replace a planted link instead of writing
through it."""

from __future__ import annotations

import os

import pytest

from txl_dist.files import new_directory, open_append, open_new, own_directory


def test_a_planted_link_is_replaced_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "report.png"
    os.symlink(victim, link)
    with open_new(str(link)) as f:
        f.write("ours")
    assert victim.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "ours"


def planted(tmp_path) -> tuple:
    """A victim directory holding a file, and a link to it where we make a directory."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("precious")
    link = tmp_path / "global_step1.partial"
    os.symlink(victim, link)
    return victim, link


def test_a_new_directory_removes_a_planted_link_and_leaves_its_target_alone(tmp_path):
    victim, link = planted(tmp_path)
    new_directory(str(link))
    assert link.is_dir() and not link.is_symlink() and not any(link.iterdir())
    assert [p.name for p in victim.iterdir()] == ["precious"]
    own_directory(str(link))


def test_a_new_directory_replaces_a_file_or_an_old_directory(tmp_path):
    (tmp_path / "file").write_text("stale")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "stale.pt").write_text("stale")
    for name in ("file", "old"):
        new_directory(str(tmp_path / name))
        assert (tmp_path / name).is_dir() and not any((tmp_path / name).iterdir())


def test_a_link_is_no_directory_of_ours(tmp_path):
    _, link = planted(tmp_path)
    with pytest.raises(FileExistsError, match="is not a directory of ours"):
        own_directory(str(link))


@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_an_append_replaces_a_planted_link_or_fifo_and_keeps_a_file_of_ours(tmp_path, planted):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = tmp_path / "metrics.jsonl"
    if planted == "link":
        os.symlink(victim, path)
    else:
        os.mkfifo(path)  # opened for writing, a FIFO without a reader would block
    for row in ("one\n", "two\n"):
        with open_append(str(path)) as f:
            f.write(row)
    assert victim.read_text() == "precious\n"
    assert not path.is_symlink() and path.read_text() == "one\ntwo\n"
