"""This process's resident host memory: now, at its peak since start-up, and at its peak since a
mark (`mark`): what a step takes beyond what stays between steps, without start-up's own peak
(model building, DeepSpeed's initialisation)."""

from __future__ import annotations

import resource

import psutil

_peak_before_mark = 0  # Linux's peak counter restarts at a mark; the run's peak is kept here


def mark() -> bool:
    """Start the peak since a mark afresh (Linux's clear_refs); False where it cannot, and the
    peak since a mark is then the one since start-up."""
    global _peak_before_mark
    peak = peak_bytes()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    _peak_before_mark = peak
    return True


def peak_bytes() -> int:
    """The most this process has held resident since start-up."""
    return max(_peak_before_mark, _hwm_and_rss()[0])


def beyond_now_at_peak_since_mark() -> int:
    """What this process held at its peak since the last mark beyond what it holds now."""
    peak, now = _hwm_and_rss()
    return max(0, peak - now)


def _hwm_and_rss() -> tuple[int, int]:
    """Linux's peak (since start-up or the last mark) and current resident bytes; elsewhere
    getrusage's peak and psutil's current."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return _kb(fields["VmHWM"]), _kb(fields["VmRSS"])
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return peak, psutil.Process().memory_info().rss


def _kb(field: str) -> int:
    return int(field.split()[0]) * 1024  # "  2192 kB"
