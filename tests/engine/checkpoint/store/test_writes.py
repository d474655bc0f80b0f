"""A save's files written to last: a snapshot's with direct I/O, each one's record from memory."""

import os
import threading
from pathlib import Path

import pytest
import torch

from tests.engine.checkpoint.snapshot.test_arena import saved_bytes
from txl_dist.engine.checkpoint.snapshot.arena import HostArena, serialized
from txl_dist.engine.checkpoint.snapshot.background import WRITER_NICENESS, yield_cores
from txl_dist.engine.checkpoint.store import writes
from txl_dist.engine.checkpoint.store.integrity import digests, write_synced


def snapshot(tmp_path, arena):
    values = [{"w": torch.randn(1000 + k, 37)} for k in range(3)]  # sizes of no whole page
    paths = [str(tmp_path / "deep" / f"f{k}.pt") for k in range(3)]
    files = {path: serialized(value, arena) for path, value in zip(paths, values)}
    files[str(tmp_path / "tokenizer.json")] = b'{"model": {}}'
    return values, files


def test_a_snapshot_is_written_directly_each_file_exact_and_recorded_as_read_back(tmp_path):
    values, files = snapshot(tmp_path, HostArena())
    records = writes.write_files(files)
    names = [os.path.relpath(path, tmp_path) for path in files]
    assert {os.path.relpath(p, tmp_path): r for p, r in records.items()} == digests(
        str(tmp_path), names, sync=False
    )
    for value, path in zip(values, files):
        assert (tmp_path / path).read_bytes() == saved_bytes(value)  # cut to size, not padded
    assert (tmp_path / "tokenizer.json").read_bytes() == b'{"model": {}}'
    # Direct I/O takes the arena's files as they are (aligned); on Linux it is used.
    again = {f"{p}.again": f for p, f in files.items() if p.endswith(".pt")}
    assert all(writes._written_directly(p, f) for p, f in again.items())


def test_without_direct_io_the_files_and_records_are_the_same(tmp_path, monkeypatch):
    _, files = snapshot(tmp_path / "direct", HostArena())
    direct = writes.write_files(files)
    monkeypatch.setattr(writes, "O_DIRECT", 0)  # as on a system without it
    buffered = writes.write_files({p.replace("direct", "buffered"): f for p, f in files.items()})
    assert list(buffered.values()) == list(direct.values())
    for path in files:
        assert Path(path).read_bytes() == Path(path.replace("direct", "buffered")).read_bytes()


def test_the_writer_yields_the_cores_and_only_its_own_thread_does():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    seen = []

    def writer():
        yield_cores()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    assert seen == [WRITER_NICENESS]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


@pytest.mark.parametrize("direct", [True, False])
def test_a_planted_link_is_never_written_through(tmp_path, monkeypatch, direct):
    if not direct:
        monkeypatch.setattr(writes, "O_DIRECT", 0)
    _, files = snapshot(tmp_path, HostArena())
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    first = Path(next(iter(files)))  # where a file of the save goes
    first.parent.mkdir()
    first.symlink_to(victim)
    with pytest.raises(FileExistsError):
        writes.write_files(files)
    assert victim.read_bytes() == b"precious"


def test_a_synced_file_replaces_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "latest.partial")
    write_synced(str(tmp_path / "latest.partial"), "global_step1")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "latest.partial").is_symlink()
    assert (tmp_path / "latest.partial").read_text() == "global_step1"
