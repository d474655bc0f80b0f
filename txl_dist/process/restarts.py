"""Restarts after a failure: which rank died and why, told by the next start.

A launcher that restarts the ranks (torchrun --max-restarts, or pretrain.sbatch's loop around
srun) knows how its ranks ended, but says so in its own log on its own node, if at all; a rank
killed by a signal says nothing. So each rank runs under a guard, its parent: launch/pretrain.py
becomes the guard when restarts are on, starts the rank as its child and waits. When the rank
fails, the guard writes a note into the run directory (shared by every node, like the
checkpoints), OUT_DIR/errors/exit-rankR.json: rank, node, host, exit code or signal, time. The
next start's rank 0 turns the notes into one line, with the checkpoint it resumes from.

The guard imports nothing heavy (it starts before torch): it learns the run directory from its
rank, which writes it into a private file the guard names in TXL_GUARD_NOTE.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from txl_dist.files import open_new

HANG_EXIT_CODE = 75  # a rank's watchdog found the run hung (EX_TEMPFAIL: a restart may well work)
GUARD_NOTE_ENV = "TXL_GUARD_NOTE"  # set in a guarded rank: where to write its run directory
LAUNCHER_ENV = "TXL_LAUNCHER_PID"  # set in a guarded rank: the launcher's pid, its guard's parent
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)  # the ranks' stop signals
_PR_SET_PDEATHSIG = 1


def env_int(*names: str, default: int) -> int:
    """The first of these environment variables that is set, as a whole number >= 0; else
    `default`. A launcher's or a user's typo ends the process in one line naming it (exit 2:
    the guard and the ranks read these before anything could report it otherwise)."""
    for name in names:
        value = os.environ.get(name)
        if value:
            if value.strip().isdigit():
                return int(value)
            print(
                f"config error: environment variable {name}={value[:40]!r} is not a whole "
                f"number >= 0: set it to one or unset it",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(2)  # txl_dist.cli.USAGE_ERROR, not imported before torch
    return default


def launcher_pid() -> int:
    """The pid of the launcher that started this rank: its parent, or its guard's parent."""
    return int(os.environ.get(LAUNCHER_ENV) or os.getppid())


def restart_count() -> int:
    """Restarts before this start: pretrain.sbatch's own (TXL_RESTART) or torchrun's."""
    return env_int("TXL_RESTART", "TORCHELASTIC_RESTART_COUNT", default=0)


def max_restarts() -> int:
    """Restarts the launcher allows: pretrain.sbatch's TXL_MAX_RESTARTS, or torchrun's."""
    return env_int("TXL_MAX_RESTARTS", "TORCHELASTIC_MAX_RESTARTS", default=0)


def guard_if_restarting() -> None:
    """In a launcher that restarts ranks, run this process's rank as a guarded child and exit
    as it did; otherwise (or in the child itself) return at once."""
    if GUARD_NOTE_ENV in os.environ or max_restarts() == 0:
        return
    if _shares_its_store() and os.environ.get("RANK", "0") == "0":
        print(
            "[txl-dist] warning: torchrun shares its rendezvous store with the ranks, so its "
            "restarts would hang (the new ranks find their predecessors' addresses): start it "
            "with --standalone (one node) or --rdzv-backend c10d, and "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
            file=sys.stderr,
            flush=True,
        )
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun starts ranks in sessions of their own:
        _die_with_parent()  # without this a killed torchrun would leave us and the rank behind
    fd, note = tempfile.mkstemp(prefix="txl-guard-")  # mode 0600: only we and the rank
    os.close(fd)
    try:
        returncode = _run_rank(note)
        if returncode != 0:
            with contextlib.suppress(OSError):  # a note we cannot write must not hide the exit
                _write_exit_note(note, returncode)
    finally:
        os.remove(note)
    if returncode < 0:  # end by the same signal, so the launcher sees what the rank saw
        with contextlib.suppress(OSError):  # SIGKILL keeps its default; others may not have it
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        returncode = 128 - returncode  # the shell's code, should the signal not end us
    sys.exit(returncode)


def _shares_its_store() -> bool:
    """Does torchrun restart ranks and keep one store for all their starts (pytorch#135712)?"""
    restarts = env_int("TORCHELASTIC_MAX_RESTARTS", default=0)
    return restarts > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def _run_rank(note: str) -> int:
    """Run `python argv` as the rank; forward the stop signals; return its exit code."""
    child = subprocess.Popen(
        [sys.executable, *sys.orig_argv[1:]],
        env={**os.environ, GUARD_NOTE_ENV: note, LAUNCHER_ENV: str(os.getppid())},
        preexec_fn=_die_with_parent,
    )
    for sig in FORWARDED:  # usually the rank got the signal too (process group, SLURM step)
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    while True:
        with contextlib.suppress(InterruptedError):
            return child.wait()


def _die_with_parent() -> None:
    """SIGKILL when our parent dies (the rank: when its guard dies, say by a launcher that
    kills only its own children)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tell_guard(out_dir: str) -> None:
    """In a guarded rank: give the guard the run directory its exit note goes to."""
    note = os.environ.get(GUARD_NOTE_ENV)
    if note:
        with open(note, "w") as f:
            f.write(out_dir)


def _write_exit_note(note: str, returncode: int) -> None:
    with open(note) as f:
        out_dir = f.read()
    if not out_dir:  # the rank failed before it had a run directory: its own line says why
        return
    record = dict(
        rank=os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")),
        node=os.environ.get("GROUP_RANK", os.environ.get("SLURM_NODEID", "?")),
        host=os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        pid=os.getpid(),
        returncode=returncode,
        # Launchers count restarts per node (torchrun: a node that restarts because another
        # did counts none), so the failed rank's count says which restart comes next.
        next_restart=restart_count() + 1,
        time=time.time(),
    )
    path = os.path.join(out_dir, "errors", f"exit-rank{record['rank']}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open_new(path + ".tmp") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)  # rank 0 of the next start never reads half a note


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):  # a note from elsewhere may name no signal
            return f"was killed by {signal.Signals(-returncode).name}"
        return f"was killed by signal {-returncode}"
    if returncode == HANG_EXIT_CODE:  # its hang line, in the log above, names the silent ranks
        return f"found the run hung (exit {returncode})"
    return f"exited with code {returncode}"


NOTE_FIELDS = {"rank": (str, int), "node": (str, int), "host": str, "returncode": int,
               "next_restart": int, "time": (int, float)}  # fmt: skip
"""An exit note's fields and their types (`exit_note` writes them)."""


def take_exit_notes(out_dir: str) -> list[dict]:
    """The exit notes of the previous start, first failure first; removed once read. A note
    that is no regular file, over the metadata cap or malformed (a run directory received from
    elsewhere) is named in one line and left out: it only tells, it decides nothing."""
    records = []
    for path in glob.glob(os.path.join(out_dir, "errors", "exit-rank*.json")):
        try:
            records.append(read_exit_note(path))
        except ValueError as err:
            print(f"txl-dist: exit note left out: {err}", file=sys.stderr, flush=True)
        os.remove(path)
    return sorted(records, key=lambda r: r["time"])


def read_exit_note(path: str) -> dict:
    """One exit note, read as a received file (capped, no link followed), its fields checked."""
    # Imported here: the guard starts before torch and imports nothing heavy (module docstring).
    from data_pipeline.limits import METADATA_BYTES
    from data_pipeline.received import read_received_text

    text = read_received_text(path, METADATA_BYTES, "run's exit note")
    try:
        note = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON ({err})") from None
    if not isinstance(note, dict):
        raise ValueError(f"{path} holds a JSON {type(note).__name__}, not an object")
    for field, kind in NOTE_FIELDS.items():
        if not isinstance(note.get(field), kind) or isinstance(note.get(field), bool):
            raise ValueError(f"{path}: its {field!r} is {note.get(field)!r}")
    return note


def restart_line(notes: list[dict], resume: str) -> str | None:
    """The line a restarted run starts with: who failed, how, and where training resumes;
    None for a first start with nothing to tell."""
    restart = max([restart_count()] + [note["next_restart"] for note in notes])
    if not notes and restart == 0:
        return None
    if notes:
        first = notes[0]
        what = (
            f"rank {first['rank']} (node {first['node']}, host {first['host']}) "
            f"{how_it_ended(first['returncode'])} "
            f"{time.time() - first['time']:.1f} s ago"
        )
        if len(notes) > 1:
            what += f", then {len(notes) - 1} more rank(s) ended"
    else:  # a guard that wrote nothing: its node went away with it
        what = "no rank left an exit note (its node may be gone)"
    counted = f"restart {restart} of at most {max_restarts()}: " if restart else ""
    return f"{counted}{what}; resuming from {resume}"
