"""A checkpoint's files against their record: size, kind and place of each file."""

import zlib

import numpy as np
import pytest

from tests.engine.checkpoint.on_disk import fake_checkpoint
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint.store.integrity import record_of


@pytest.mark.parametrize(
    "name,problem",
    [
        ("memory_rank0.pt", "memory_rank0.pt is missing"),
        (
            "../../etc/hostname",
            "txl.json records '../../etc/hostname', a path outside the checkpoint",
        ),
        ("sub", "sub is not a regular file"),
    ],
)
def test_a_record_is_checked_file_by_file(tmp_path, name, problem):
    fake_checkpoint(tmp_path, 10, 1, 2)
    tag = tmp_path / "global_step10"
    (tag / "sub").mkdir()
    (tag / "memory_rank0.pt").rename(tag / "moved.pt")
    assert checkpoint.damage(str(tag), {name: {"bytes": 0, "crc32": "00000000"}}) == problem


def test_records_are_zlibs_crc32_whatever_the_chunks():
    data = np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    chunks = [data[:5], data[5 : 1 << 20], np.frombuffer(data[1 << 20 :], np.uint8)]
    # earlier checkpoints' records were zlib's: the same checksum, whatever computes it
    assert record_of(chunks) == {"bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
