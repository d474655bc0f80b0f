"""txl.json: CheckpointState round-trips, reads older versions and refuses what it cannot read."""

import dataclasses
import json

import pytest

from tests.engine.checkpoint.on_disk import state
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import CheckpointState, CheckpointStateError


def test_state_round_trips_and_reads_version_0_files(tmp_path):
    saved = state()
    assert CheckpointState.from_json(saved.to_json(), "txl.json") == saved
    # What txl-dist wrote before the state had a version: DeepSpeed's key, no run id yet, the
    # run's and the stream's state in fields of their own.
    old = {k: v for k, v in dataclasses.asdict(saved).items() if k not in ("version", "parts")}
    del old["run_id"]
    old["restarts"], old["stream"] = 0, saved.parts["stream"]
    old["universal_checkpoint_info"] = {"universal_checkpoint_version": 0.2}
    read = CheckpointState.from_json(json.dumps(old), "txl.json")
    run = {"restarts": 0, "requeues": 0, "slurm_job_id": None}
    parts = {**saved.parts, "run": run}
    assert read == dataclasses.replace(saved, run_id=None, parts=parts, version=0)


def test_states_it_cannot_read_are_clear_errors():
    newer = json.dumps({**dataclasses.asdict(state()), "version": checkpoint.STATE_VERSION + 1})
    with pytest.raises(CheckpointStateError, match="a/txl.json has checkpoint version .*upgrade"):
        CheckpointState.from_json(newer, "a/txl.json")
    with pytest.raises(CheckpointStateError, match="a/txl.json lacks global_rows, rows_per_rank"):
        CheckpointState.from_json(
            json.dumps({"step": 3, "world_size": 1, "config": {}}), "a/txl.json"
        )
