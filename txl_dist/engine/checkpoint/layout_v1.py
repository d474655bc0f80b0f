"""The reader of the previous layouts: a version 0 or 1 record as version 2 holds it.

Versions 0 and 1 kept the run's and the streams' state in the record's own fields, version 2
under the names of their parts; version 0 also lacked the run id, requeues and SLURM job and
held DeepSpeed's universal_checkpoint_info. Their files are version 2's.
"""

from __future__ import annotations

from typing import Any


def upgraded(values: dict[str, Any]) -> dict[str, Any]:
    """A version 0 or 1 record's values as version 2's (the version as read)."""
    values = dict(values)
    run = {
        "restarts": values.pop("restarts", 0),
        "requeues": values.pop("requeues", 0),
        "slurm_job_id": values.pop("slurm_job_id", None),
    }
    values["parts"] = {"run": run, "stream": values.pop("stream", None)}
    return values
