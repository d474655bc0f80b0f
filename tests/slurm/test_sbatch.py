"""pretrain.sbatch on a real SLURM cluster: a plain job, then a preempted 2-node job."""

from __future__ import annotations

import os
import re
import signal
import time

from tests.integration.runs import eval_ppl, train_losses
from tests.slurm.conftest import STEPS, pretrain_args, rank_pid, steps_logged, wait_for


def test_job_trains_evaluates_and_checkpoints(reference):
    out, job = reference
    log = (out / f"slurm-{job['JobId']}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-3000:]
    assert sorted(train_losses(out)) == list(range(1, STEPS + 1))
    assert eval_ppl(out) > 0
    assert (out / "checkpoints" / "latest").read_text().strip() == f"global_step{STEPS}"
    assert f"slurm job {job['JobId']}, restart 0" in log


def test_preempted_two_node_job_checkpoints_requeues_and_continues(
    cluster, reference, wikitext, tmp_path
):
    out = tmp_path / "run"
    # Two nodes x 1 task: the rendezvous crosses the namespaces; one thread per rank as in the
    # 1 node x 2 task reference, so the losses can match exactly.
    nodes = ["--nodes=2", "--ntasks-per-node=1", "--export=ALL,OMP_NUM_THREADS=1"]
    job_id = cluster.sbatch(out, nodes, pretrain_args(out, wikitext, []))
    wait_for("the first training step", lambda: steps_logged(out) >= 1, timeout=180)
    # What SLURM does --signal seconds before the time limit: USR1 to the batch shell only.
    cluster.run("scancel", "--batch", "--signal=USR1", job_id)
    # A requeued job waits ~150 s (its BeginTime) before it may start again; skip the wait.
    wait_for(
        "the requeue",
        lambda: cluster.job(job_id)["JobState"] == "PENDING",
        timeout=120,
        interval=0.5,
    )
    # slurmd refuses a credential issued in the same second its job was revoked (the requeue):
    # "Job credential revoked". The BeginTime delay exists for that; a 2 s wait is enough.
    time.sleep(2)
    cluster.run("scontrol", "update", f"jobid={job_id}", "StartTime=now")
    job = cluster.wait_job(job_id, timeout=300)

    log = (out / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-3000:]
    assert job["Restarts"] == "1"
    match = re.search(r"stopping at step (\d+): SIGUSR1 received", log)
    assert match, log[-3000:]
    stopped = int(match.group(1))
    assert stopped < STEPS  # mid-run, so the resumed job has steps to continue
    assert f"resumed global_step{stopped} at step {stopped}" in log
    assert f"slurm job {job_id}, restart 1" in log
    assert "2 ranks on 2 node(s)" in log
    assert train_losses(out) == train_losses(reference[0])  # the same sequence, bit for bit


def test_killed_rank_fails_the_job_fast(cluster, wikitext, tmp_path):
    out = tmp_path / "run"
    args = pretrain_args(out, wikitext, ["train.save_interval=2"])
    job_id = cluster.sbatch(out, ["--ntasks-per-node=2"], args)
    wait_for("the first checkpoint", (out / "checkpoints" / "latest").exists, timeout=180)
    os.kill(rank_pid(out, rank=1), signal.SIGKILL)
    killed = time.monotonic()
    job = cluster.wait_job(job_id, timeout=60)
    assert time.monotonic() - killed < 60
    assert job["JobState"] == "FAILED" and job["ExitCode"] != "0:0"
    assert job["Restarts"] == "0"  # a failure is not a preemption: no requeue
