"""Compute threads from the cores this process may use and what else keeps them busy.

torch starts one OpenMP thread per core it sees. When another process keeps some of those cores
busy, every parallel region waits at its barrier for the thread the scheduler left out: on a
shared 2-core machine the tiny run trained 5-10 times slower at torch's default than with
`OMP_NUM_THREADS=1`. So a command picks its threads once, at start-up: the cores of its affinity
mask (capped by a cgroup's CPU quota), less those other processes kept busy over a short
sample of /proc/stat, shared among the machine's ranks. A user's `OMP_NUM_THREADS` is kept as
given (and said to be more than the free cores when it is). A resumed run keeps the threads its
checkpoint was trained with (engine/checkpoint/parts/threads.py): float reductions can differ
with the thread count, and a resume should repeat the uninterrupted run's losses.
"""

from __future__ import annotations

import logging
import math
import os
import time

import torch

log = logging.getLogger(__name__)

SAMPLE_S = 0.2
"""How long the other processes' load is sampled (this process sleeps meanwhile)."""
# A core counts as free once this much of it is: a process at 70% leaves no room for a thread
# that has to keep pace with its siblings at every barrier.
FREE_MARGIN = 0.3


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup's CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = _cgroup_quota()
    return max(1, min(cores or 1, math.ceil(quota) if quota else cores or 1))


def _cgroup_quota() -> float | None:
    """The cgroup's CPU limit in cores (v2's cpu.max, else v1's CFS quota), or None."""
    v2 = _read("/sys/fs/cgroup/cpu.max").split()
    if v2:
        quota, period = (v2 + [""])[:2]
    else:
        quota = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").strip()
        period = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us").strip()
    try:
        return int(quota) / int(period) if int(quota) > 0 else None
    except ValueError:  # "max", or no cgroup file
        return None


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read(64)
    except OSError:
        return ""


def busy_cores(sample_s: float = SAMPLE_S) -> float:
    """Cores of this process's affinity mask other processes kept busy over `sample_s` (this
    process sleeps through it); 0 where /proc/stat cannot be read."""
    before = _cpu_ticks()
    time.sleep(sample_s)
    after = _cpu_ticks()
    busy = 0.0
    for cpu, (idle, total) in after.items():
        if cpu in before and total > before[cpu][1]:
            busy += 1 - (idle - before[cpu][0]) / (total - before[cpu][1])
    return busy


def _cpu_ticks() -> dict[int, tuple[int, int]]:
    """(idle ticks, all ticks) of each CPU of this process's affinity mask, from /proc/stat."""
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    ticks = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if not name.startswith("cpu") or name == "cpu":
                    continue
                cpu, values = int(name[3:]), [int(v) for v in fields[:8]]
                if mine is None or cpu in mine:
                    ticks[cpu] = (values[3] + values[4], sum(values))  # idle + iowait
    except (OSError, ValueError):
        return {}
    return ticks


def threads_for(cores: int, busy: float, ranks: int) -> int:
    """Threads per rank for `ranks` ranks on `cores` cores while others keep `busy` of them."""
    free = max(0.0, cores - busy)
    return max(1, min(cores // max(1, ranks), math.floor((free + FREE_MARGIN) / max(1, ranks))))


def choose_threads(ranks: int = 1, say: bool = True) -> int:
    """Set torch's compute threads for one of `ranks` ranks on this machine, unless the user
    set OMP_NUM_THREADS; one line when other processes leave fewer cores than usual."""
    cores, busy = usable_cores(), busy_cores()
    threads = threads_for(cores, busy, ranks)
    given = os.environ.get("OMP_NUM_THREADS")
    if given:
        # torchrun's 1 is no choice of the user's, and fewer than one thread there is not
        if say and given.isdigit() and int(given) > 1 and int(given) * ranks > cores - busy:
            log.warning(
                f"OMP_NUM_THREADS={given} with {ranks} rank(s): more threads than the "
                f"{max(0.0, cores - busy):.1f} of {cores} cores other processes leave free; "
                "compute may wait on preempted threads"
            )
        return torch.get_num_threads()
    torch.set_num_threads(threads)
    if say and threads < cores // max(1, ranks):
        log.warning(
            f"other processes keep {busy:.1f} of this machine's {cores} cores busy: "
            f"{threads} compute thread(s) per rank instead of {cores // max(1, ranks)} "
            "(set OMP_NUM_THREADS to choose)"
        )
    return threads


def reuse_threads(saved: object) -> None:
    """On resume, set torch's compute threads to ``saved``, the count the checkpoint's run
    trained with, unless the user set OMP_NUM_THREADS; one line when that differs from the
    count the load chose at this start (a damaged count is said and left alone)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return
    now = torch.get_num_threads()
    if isinstance(saved, bool) or not isinstance(saved, int) or saved < 1:
        log.warning(f"checkpoint threads.per_rank is {saved!r:.40}, not a count: {now} kept")
        return
    if saved != now:
        torch.set_num_threads(saved)
        log.warning(
            f"resume: {saved} compute thread(s) per rank as the checkpoint's run had, not the "
            f"{now} this machine's load would give now, so the losses repeat the "
            "uninterrupted run's (set OMP_NUM_THREADS to choose)"
        )
