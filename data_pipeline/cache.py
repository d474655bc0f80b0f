"""Directories in txl-prepare's cache (extracted archives, cut corpora), built once, atomically."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def built_once(target: Path, digest: str, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build(tmp)`` into a temporary sibling renamed when complete; its
    ``.done`` marker holds ``digest``, and a marker that does not (another input, or a planted
    marker) means build again."""
    done = target / ".done"
    if done.exists() and done.read_text().strip() == digest:
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
