"""The closing lines of a run: how it ended, its final scores, its checkpoint, what to run next.

Printed by rank 0 as the run ends, so the console does not end on the libraries' lines: after a
finished run, the final evaluation of each split and `txl-export`; after an early stop (Ctrl-C,
a stop signal, train.max_wallclock), that the same command with `--resume auto` continues.
"""

from __future__ import annotations

import os
from typing import Any

from txl_dist.evaluation.scores import format_score


def closing_summary(
    *,
    step: int,
    max_steps: int,
    stopped_early: str | None,
    evaluations: dict[str, dict[str, Any]],
    checkpoint: str,
) -> list[str]:
    """The summary's lines; `evaluations` holds the latest metrics record of each split and
    `checkpoint` is the one saved at `step`."""
    if stopped_early:
        lines = [f"stopped at step {step} of {max_steps} ({stopped_early}), checkpointed"]
    else:
        lines = [f"finished: {step} steps"]
    for split, record in evaluations.items():
        lines.append(f"  {split:<5} {format_score(record)}  loss {record['loss']:.4f}  "
                     f"(step {record['step']})")  # fmt: skip
    lines += [
        f"  checkpoint {checkpoint}",
        "next:",
        f"  export:    txl-export {checkpoint} {_export_dir(checkpoint)}",
    ]
    if stopped_early:
        lines.append("  continue:  the same command with --resume auto")
    else:
        lines.append("  train on:  raise train.max_steps, then the same command with --resume auto")
    return lines


def _export_dir(checkpoint: str) -> str:
    """RUN_DIR-export beside the run directory (checkpoint is RUN_DIR/checkpoints/TAG)."""
    return os.path.dirname(os.path.dirname(os.path.normpath(checkpoint))) + "-export"
