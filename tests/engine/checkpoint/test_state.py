"""txl.json: CheckpointState round-trips, reads older versions and refuses what it cannot read."""

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO_ROOT
from tests.engine.checkpoint.on_disk import state
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.export import main as export_main
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


FIXTURE = REPO_ROOT / "tests" / "fixtures" / "checkpoint_v1" / "global_step4"


def with_record(tmp_path: Path, change) -> Path:
    """The version 1 fixture checkpoint copied, its txl.json's values replaced by change(them)."""
    tag_dir = tmp_path / "global_step4"
    shutil.copytree(FIXTURE, tag_dir)
    values = json.loads((tag_dir / "txl.json").read_text())
    (tag_dir / "txl.json").write_text(json.dumps(change(values)))
    return tag_dir


def first_file(entry):
    return lambda v: {**v, "files": {**v["files"], next(iter(v["files"])): entry}}


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda v: [v], "holds a JSON list"),
        (lambda v: {**v, "version": "2"}, "version '2' is no version"),
        (lambda v: {**v, "version": True}, "version True is no version"),
        (lambda v: {**v, "files": ["a.pt"]}, "files entry 'files' is not {bytes: size, crc32"),
        (first_file({"crc32": "8cb28354"}), "files entry 'bf16_zero_pp_rank_0_mp_rank_00_optim"),
        (first_file({"bytes": -1, "crc32": "0"}), "files entry 'bf16_zero_pp_rank_0_mp_rank_00_"),
        (first_file({"bytes": 5, "crc32": 5}), "files entry 'bf16_zero_pp_rank_0_mp_rank_00_opt"),
    ],
)
def test_txl_export_names_the_key_of_a_malformed_record(tmp_path, capsys, change, named):
    tag_dir = with_record(tmp_path, change)
    assert export_main([str(tag_dir), str(tmp_path / "out")]) == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{tag_dir / 'txl.json'}: {named}" in err or f"txl.json {named}" in err, err
    assert (
        "restore the checkpoint or resume from another" in err and not (tmp_path / "out").exists()
    )


def test_resume_names_a_files_entry_without_its_size(tmp_path):
    tag_dir = with_record(tmp_path, first_file({"crc32": "8cb28354"}))
    settings = ["--set", "model.n_token=267735", "--set", f"train.out_dir={tmp_path / 'r'}"]
    args = [sys.executable, "launch/pretrain.py", "--config", "configs/tiny.json"]
    args += ["--resume", tag_dir, *settings]
    proc = processes.run(args, timeout=120, cwd=REPO_ROOT, env={**os.environ, "TXL_SET": ""})
    assert proc.returncode == USAGE_ERROR, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"checkpoint error: {tag_dir / 'txl.json'}: files entry 'bf16_")
    assert proc.stderr.count("\n") == 1, proc.stderr
