"""Files we write into run directories, which others may have written first: never through a link.

A run directory can be shared or received, so a name we write (report.png, errors/rankR.txt, an
exit note, config.json, metrics.jsonl, a checkpoint's staging directory and files) may already
be a symlink planted to make us overwrite a file elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from typing import IO

# A new file, created here and now: never one that exists, never through a link.
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def open_new(path: str, mode: str = "w") -> IO:
    """path opened for writing as a new file: whatever held the name (a planted link among them)
    is removed first, and the file is created exclusively without following links."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.fdopen(os.open(path, NEW_FILE, 0o644), mode)


def open_append(path: str) -> IO:
    """path opened for appending (created if missing) as a regular file of ours: whatever else
    holds the name (a planted link, a FIFO, another's file) is removed first, and the open
    neither follows a link nor blocks on a FIFO planted meanwhile."""
    with contextlib.suppress(FileNotFoundError):
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            remove(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    return os.fdopen(os.open(path, flags, 0o644), "a")


def new_directory(path: str) -> None:
    """path made a new, empty directory of ours: whatever held the name is removed first, then
    it is created, which fails if anything took the name meanwhile."""
    remove(path)
    os.mkdir(path)
    own_directory(path)


def directory(path: str) -> None:
    """path a directory of ours: kept if it is one, else (a planted link, a file) replaced by a
    new one."""
    info = None
    with contextlib.suppress(FileNotFoundError):
        info = os.lstat(path)
    if info is None or not stat.S_ISDIR(info.st_mode):
        new_directory(path)
    own_directory(path)


def remove(path: str) -> None:
    """Whatever holds the name removed: a directory with what it holds, a file or a link as
    itself (never what a link points to)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def own_directory(path: str) -> None:
    """Raise unless path is a directory of ours itself, not a link to one."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise FileExistsError(f"{path} is not a directory of ours (a link, or another's)")
