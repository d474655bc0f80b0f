"""keep_freed_memory: a freed 20 MiB buffer stays with the process (no mmap, no trim), unless
the user set glibc's own variables."""

from __future__ import annotations

import os
import sys

import pytest

from tests.processes import run

# Resident KiB after a 20 MiB buffer is written and freed, minus before it was made.
PROBE = """
import sys
from txl_dist.process.allocator import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
before = rss_kib()
buffer = bytearray(20 << 20)  # zero-filled: every page written
del buffer
print(applied, rss_kib() - before)
"""


def kept_kib(mode: str, **env: str) -> tuple[str, int]:
    proc = run([sys.executable, "-c", PROBE, mode], timeout=60, check=True,
               env={**os.environ, **env})  # fmt: skip
    applied, kept = proc.stdout.split()
    return applied, int(kept)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
def test_a_freed_buffer_stays_with_the_process_unless_the_user_set_glibcs_variables():
    applied, kept = kept_kib("keep")
    assert applied == "True" and kept > 15 << 10
    applied, kept = kept_kib("default")
    assert applied == "None" and kept < 5 << 10  # glibc's own: an mmap, unmapped when freed
    applied, kept = kept_kib("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert applied == "False" and kept < 5 << 10
