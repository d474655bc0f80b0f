"""The stop note: private, names the job and the nodes to leave out, created exclusively and
never through a planted link."""

import json
import os

import pytest

from txl_dist.stop_note import write_stop_note


def test_stop_file_is_private_and_names_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    path = tmp_path / "stop.json"
    write_stop_note(str(path), 7, "max_wallclock", "runs/x/checkpoints")
    assert json.loads(path.read_text()) == dict(
        step=7, reason="max_wallclock", checkpoints="runs/x/checkpoints", slurm_job_id="4242"
    )
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_straggler_stop_names_the_nodes_to_exclude(tmp_path):
    path = tmp_path / "stop.json"
    write_stop_note(str(path), 15, "straggler rank 1", "ck", ["gpu-07", "gpu-09"])
    assert json.loads(path.read_text())["exclude"] == "gpu-07,gpu-09"


def test_a_planted_link_or_file_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "stop.json"
    os.symlink(victim, link)
    with pytest.raises(FileExistsError):
        write_stop_note(str(link), 7, "signal", "ck")
    assert victim.read_text() == "precious"
    with pytest.raises(FileExistsError):
        write_stop_note(str(victim), 7, "signal", "ck")
    assert victim.read_text() == "precious"
