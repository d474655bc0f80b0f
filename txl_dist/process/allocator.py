"""glibc's allocator told to keep the buffers a step frees, instead of handing them back to the
kernel and faulting them in again at the next step.

By default glibc serves a request of 128 KiB or more with its own mmap (the threshold rises
only as such buffers are freed) and gives the top of its heap back to the kernel once 128 KiB
or more of it is free. Training and evaluation allocate and free the same few-MiB activations
every step, so a fresh process spends a good part of its time in page faults: txl-eval scored
4-6 s of forward passes where the training process, whose thresholds had risen, took 4 (the
measured figures are in docs/evaluation.md). Buffers up to 32 MiB (glibc's largest mmap
threshold) come from the heap here, and the heap is not trimmed: a process keeps the memory of
its largest step, which it needs again at the next one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h's mallopt parameters
HEAP_BUFFERS_UP_TO = 32 << 20
"""Largest request served from the heap: glibc's ceiling on M_MMAP_THRESHOLD (64-bit)."""
NEVER_TRIM = 2**31 - 1
"""Free bytes at the top of the heap before it is trimmed: mallopt's largest value (an int)."""
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
"""glibc's own environment variables: a user who sets one keeps what they chose."""


def keep_freed_memory() -> bool:
    """Serve buffers up to HEAP_BUFFERS_UP_TO from a heap that is never trimmed; False where
    nothing changed (not glibc, or the user set glibc's variables)."""
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    path = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(path)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # no C library found, or not glibc's
        return False
    # Both or neither: setting one turns glibc's dynamic threshold off and keeps the other's
    # default (an mmap per 128 KiB buffer, or a heap trimmed at every step), slower than both.
    return bool(mallopt(M_MMAP_THRESHOLD, HEAP_BUFFERS_UP_TO)) and bool(
        mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)
    )
