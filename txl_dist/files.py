"""Files we write into run directories, which others may have written first: never through a link.

A run directory can be shared or received, so a name we write (report.png, errors/rankR.txt, an
exit note) may already be a symlink planted to make us overwrite a file elsewhere.
"""

from __future__ import annotations

import contextlib
import os
from typing import IO


def open_new(path: str, mode: str = "w") -> IO:
    """path opened for writing as a new file: whatever held the name (a planted link among them)
    is removed first, and the file is created exclusively without following links."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    return os.fdopen(os.open(path, flags, 0o644), mode)
