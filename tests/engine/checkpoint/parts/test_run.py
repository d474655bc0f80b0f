"""RunPart: a resume counts a restart, and a requeue when the same SLURM job starts afresh."""

from __future__ import annotations

import pytest

from txl_dist.engine.checkpoint.parts.run import RunPart, RunState


@pytest.fixture
def launcher(monkeypatch):
    """The environment a launcher gives, cleared of this machine's own."""
    for name in ("SLURM_JOB_ID", "TXL_RESTART", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_save_records_the_counts_and_the_slurm_job(launcher):
    launcher.setenv("SLURM_JOB_ID", "77")
    state = RunPart(RunState("r", step=5, restarts=2, requeues=1)).state_dict()
    assert state == {"restarts": 2, "requeues": 1, "slurm_job_id": "77"}
    launcher.delenv("SLURM_JOB_ID")
    assert RunPart(RunState("r")).state_dict()["slurm_job_id"] is None


@pytest.mark.parametrize(
    "job, restart, requeued",
    [
        ("77", None, True),  # the same job started again by SLURM: a requeue
        ("77", "1", False),  # the same job, its ranks restarted by the launcher inside it
        ("78", None, False),  # another job: a resume by hand
        (None, None, False),  # no SLURM at all
    ],
)
def test_a_resume_counts_a_restart_and_a_requeue_only_for_the_same_job(
    launcher, job, restart, requeued
):
    if job is not None:
        launcher.setenv("SLURM_JOB_ID", job)
    if restart is not None:
        launcher.setenv("TXL_RESTART", restart)
    run = RunState("r", step=5)
    RunPart(run).load_state_dict({"restarts": 2, "requeues": 1, "slurm_job_id": "77"})
    assert (run.restarts, run.requeues) == (3, 1 + requeued)
