"""One run per output directory: a fresh start never mixes into another run's checkpoints.

A start without --resume in a directory holding checkpoints is refused before anything is
written: rerunning a command must not move `latest` back, prune the other run's checkpoints or
append a second run to its metrics. `--overwrite` moves the old run aside; nothing is deleted.
"""

from __future__ import annotations

import logging
import os
import time

from txl_dist.checkpoint_names import CHECKPOINT_DIR
from txl_dist.engine import checkpoint

log = logging.getLogger(__name__)


class RunDirError(Exception):
    """train.out_dir holds another run; the message says what to do."""


def previous_run(out_dir: str) -> str | None:
    """What the checkpoints in out_dir belong to, in words, or None when there are none."""
    directory = os.path.join(out_dir, CHECKPOINT_DIR)
    tags = checkpoint.tags_in(directory) if os.path.isdir(directory) else []
    try:
        point = checkpoint.find_resume_point("auto", out_dir)
    except (OSError, ValueError, checkpoint.UnsafeCheckpointError):  # still taken: say so
        point = None
    if point is not None:
        return f"run {point.client.run_id} (latest checkpoint {point.tag})"
    return f"checkpoints up to {tags[-1][1]} (no complete one)" if tags else None


def claim(out_dir: str, overwrite: bool, is_main: bool) -> None:
    """Make out_dir free for a fresh run, or raise RunDirError saying how.

    Every rank checks; with --overwrite only the main rank moves the old run, before the
    process group forms, so no rank writes into out_dir before it is free.
    """
    held = previous_run(out_dir)
    if held is None:
        return
    if not overwrite:
        raise RunDirError(
            f"train.out_dir {out_dir} holds {held}: continue it with --resume auto, start "
            "elsewhere with --set train.out_dir=DIR, or pass --overwrite to move it aside"
        )
    if is_main:
        aside = f"{os.path.normpath(out_dir)}.old-{time.strftime('%Y%m%d-%H%M%S')}"
        os.rename(out_dir, aside)
        log.info(f"--overwrite: moved {held} from {out_dir} to {aside}")
