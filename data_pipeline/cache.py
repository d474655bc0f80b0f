"""Directories in txl-prepare's cache (extracted archives, cut corpora), built once, atomically."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def built_once(target: Path, digest: str, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build(tmp)`` into a temporary sibling renamed when complete; its
    ``.done`` marker holds ``digest``, and a marker that does not (another input, or a planted
    marker) means build again.

    The digest is the input's, which anyone holding the input can write: a finished build is
    trusted only when it and everything in it are this user's and nobody else may change them.
    """
    done = target / ".done"
    if done.is_file() and done.read_text().strip() == digest and _only_ours(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        build(tmp)
        (tmp / ".done").write_text(digest)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _only_ours(target: Path) -> bool:
    """Whether target and everything under it belong to this user, with no link and no file
    that other users may write."""
    for path in [target, *target.rglob("*")]:
        info = path.lstat()
        if info.st_uid != os.getuid() or info.st_mode & 0o002 or stat.S_ISLNK(info.st_mode):
            return False
    return True
