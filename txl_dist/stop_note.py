"""The note an early stop leaves for the batch script (`--stop-file`): its presence means
"resume me", so it is written only once the stop's checkpoint is complete.

launch/slurm/ reads it to requeue the job: the step, why it stopped, where the checkpoints are,
the nodes to leave out and the job it belongs to.
"""

from __future__ import annotations

import json
import os

# Unlike files.open_new, nothing that holds the name is removed: a note already there is an error.
EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def write_stop_note(
    path: str, step: int, reason: str, ckpt_dir: str, slow_hosts: list[str] | None = None
) -> None:
    """Write the note at path, private to the user.

    Created exclusively and never through a link, so a planted file or symlink is an error
    rather than a file of someone else's overwritten.
    """
    note = dict(step=step, reason=reason, checkpoints=ckpt_dir)
    if slow_hosts:  # stragglers.policy=stop: the nodes a requeued job should not run on
        note["exclude"] = ",".join(slow_hosts)
    if os.environ.get("SLURM_JOB_ID"):  # the batch script requeues only its own job's note
        note["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    with os.fdopen(os.open(path, EXCLUSIVE, 0o600), "w") as f:
        json.dump(note, f)
