"""The pretrain command: the stop file is created exclusively, never through a planted link."""

import json
import os

import pytest

from txl_dist.cli.pretrain import _write_stop_file


def test_stop_file_is_private_and_names_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    path = tmp_path / "stop.json"
    _write_stop_file(str(path), 7, "max_wallclock", "runs/x/checkpoints")
    assert json.loads(path.read_text()) == dict(
        step=7, reason="max_wallclock", checkpoints="runs/x/checkpoints", slurm_job_id="4242"
    )
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_planted_link_or_file_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "stop.json"
    os.symlink(victim, link)
    with pytest.raises(FileExistsError):
        _write_stop_file(str(link), 7, "signal", "ck")
    assert victim.read_text() == "precious"
    with pytest.raises(FileExistsError):
        _write_stop_file(str(victim), 7, "signal", "ck")
    assert victim.read_text() == "precious"
