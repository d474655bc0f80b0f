"""An asynchronous save's host memory: the bytes torch.save writes, in an arena the run reuses."""

import io
import zipfile

import torch

from txl_dist.engine.checkpoint.snapshot import arena as arena_module
from txl_dist.engine.checkpoint.snapshot.arena import PAGE_BYTES, HostArena, serialized, torch_save

BLOCK = 2 * PAGE_BYTES  # every tensor below spans blocks


def saved_bytes(value) -> bytes:
    """What a checkpoint file holds for `value`."""
    buffer = io.BytesIO()
    torch_save(value, buffer)
    return buffer.getvalue()


def states(k: int) -> dict:
    weight = torch.randn(300, 20, generator=torch.Generator().manual_seed(k))
    return {"weight": weight, "rows": [torch.arange(k + 5), k], "empty": []}


def test_snapshots_hold_torch_saves_bytes_in_memory_the_arena_reserved_and_reuses(monkeypatch):
    monkeypatch.setattr(arena_module, "ARENA_BLOCK_BYTES", BLOCK)
    size = len(saved_bytes(states(0)))
    arena = HostArena()
    arena.reserve(size)
    for k in range(3):  # one save after another, as a run's
        arena.reuse()
        host = serialized(states(k), arena)
        assert b"".join(chunk.tobytes() for chunk in host.chunks) == saved_bytes(states(k))
        assert host.size == size
        assert arena.held == -(-size // BLOCK) * BLOCK  # reserved up front, never grown


def test_each_file_starts_on_a_page_and_owns_the_rest_of_its_last(monkeypatch):
    monkeypatch.setattr(arena_module, "ARENA_BLOCK_BYTES", BLOCK)
    arena = HostArena()
    files = [serialized(states(k), arena) for k in range(4)]
    for host in files:
        first, last = host.pieces[0], host.pieces[-1]
        assert first.bytes.ctypes.data % PAGE_BYTES == 0  # direct I/O's alignment
        assert last.pages.size % PAGE_BYTES == 0 and last.pages.size - last.bytes.size < PAGE_BYTES
        assert all(piece.start == 0 for piece in host.pieces[1:])  # each a run of whole pages
        assert all(piece.stop == BLOCK for piece in host.pieces[:-1])
    for earlier, later in zip(files, files[1:]):  # no page of one file is another's
        end = earlier.pieces[-1].pages
        assert end.ctypes.data + end.size <= later.pieces[0].bytes.ctypes.data or (
            later.pieces[0].block is not earlier.pieces[-1].block
        )


def test_checkpoint_files_skip_the_records_crcs_and_load_as_saved():
    file = io.BytesIO(saved_bytes(states(1)))
    assert {record.CRC for record in zipfile.ZipFile(file).infolist()} == {0}
    file.seek(0)
    loaded = torch.load(file, weights_only=True)
    assert torch.equal(loaded["weight"], states(1)["weight"]) and loaded["rows"][1] == 1
    assert torch.serialization.get_crc32_options()  # torch.save's own setting as it was
