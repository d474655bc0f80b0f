"""Which checkpoints stay: the newest `train.keep_last` of this run, with their conversions."""

from __future__ import annotations

import os
import shutil

from txl_dist.checkpoint_names import CLIENT_FILE
from txl_dist.engine.checkpoint.state import (
    ENTRY_PATTERN,
    UNIVERSAL,
    CheckpointState,
    read_latest,
    step_of,
    tags_in,
)


def prune(directory: str, keep_last: int, run_id: str | None) -> None:
    """Delete all but the newest `keep_last` complete checkpoints of run `run_id` (with their
    conversions), incomplete ones and leftovers of failed writes before them; another run's
    checkpoints (resumed from elsewhere) are not ours to delete."""
    latest = read_latest(directory)
    latest_step = step_of(latest)
    tags = tags_in(directory)
    runs = {name: _run_of(os.path.join(directory, name)) for _, name in tags}
    ours = [name for _, name in tags if runs[name] is not False and runs[name] == run_id]
    keep = set(ours[-keep_last:]) | {latest}
    for step, name in tags:
        deletable = runs[name] is False or runs[name] == run_id
        if name not in keep and step <= latest_step and deletable:
            shutil.rmtree(os.path.join(directory, name + UNIVERSAL), ignore_errors=True)
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    for name in os.listdir(directory):
        m = ENTRY_PATTERN.match(name)
        if m and m.group(3) and int(m.group(1)) <= latest_step:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _run_of(tag_dir: str) -> str | None | bool:
    """The run id a complete checkpoint belongs to; False for a partial one (no txl.json)."""
    path = os.path.join(tag_dir, CLIENT_FILE)
    if not os.path.exists(path):
        return False
    return CheckpointState.read(path).run_id
