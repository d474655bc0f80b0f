"""pretrain.sbatch on a real SLURM cluster, in each launch mode: a plain job (srun starts the
ranks), a preempted 2-node job (torchrun per node), a 2-node job that keeps stopping at
train.max_wallclock (DeepSpeed's launcher per node), a job that loses a rank (killed, stopped or
cut off by a network partition): restarted in the allocation, or failed with TXL_MAX_RESTARTS=0,
and a TXL_ELASTIC=1 job that loses a node and continues on the one left."""

from __future__ import annotations

import os
import re
import signal
import time

from tests.integration.runs import eval_ppl, rank_pid, records, train, train_losses
from tests.processes import wait_for
from tests.slurm.conftest import (
    FINISHED,
    OVERRIDES,
    STEPS,
    assert_restarted_and_resumed_exactly,
    pretrain_args,
    steps_logged,
)

# Two nodes x 1 task: the rendezvous crosses the namespaces; one thread per rank as in the
# 1 node x 2 task reference, so the losses can match exactly.
TWO_NODES = ["--nodes=2", "--ntasks-per-node=1"]


def slurm_log(out, job_id: str) -> str:
    try:
        return (out / f"slurm-{job_id}.out").read_text()
    except FileNotFoundError:
        return ""


def completes_in_the_allocation(cluster, out, job_id: str, fault: str, since: float) -> str:
    """Wait for a step trained after the restart, print how long after `since` it came, and for
    the job's end; assert it COMPLETED without a requeue and return its log."""
    wait_for("a step trained again", lambda: any(r["restart"] for r in records(out)), 180)
    print(f"{fault}: training again after {time.monotonic() - since:.1f} s")
    job = cluster.wait_job(job_id, timeout=300)
    log = slurm_log(out, job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-3000:]
    assert job["Restarts"] == "0"  # restarted inside the allocation, not requeued
    return log


def test_job_trains_evaluates_and_checkpoints(reference):
    out, job = reference
    log = (out / f"slurm-{job['JobId']}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-3000:]
    assert "2 ranks on 1 node(s)" in log and "via srun" in log
    assert sorted(train_losses(out)) == list(range(1, STEPS + 1))
    assert eval_ppl(out) > 0
    assert (out / "checkpoints" / "latest").read_text().strip() == f"global_step{STEPS}"
    assert f"slurm job {job['JobId']}, restart 0" in log
    assert "requeueing" not in log  # a finished run leaves no stop file


def test_preempted_two_node_job_checkpoints_requeues_and_continues(
    cluster, reference, wikitext, tmp_path
):
    out = tmp_path / "run"
    sbatch = [*TWO_NODES, "--export=ALL,OMP_NUM_THREADS=1"]  # torchrun: the default launcher
    wandb = ["logging.wandb.mode=offline"]
    job_id = cluster.sbatch(out, sbatch, pretrain_args(out, wikitext, wandb))
    wait_for("the first training step", lambda: steps_logged(out) >= 1, timeout=180)
    # What SLURM does --signal seconds before the time limit: USR1 to the batch shell only.
    cluster.run("scancel", "--batch", "--signal=USR1", job_id)
    wait_for(
        "the requeue",
        lambda: cluster.job(job_id)["JobState"] == "PENDING",
        timeout=120,
        interval=0.5,
    )
    cluster.start_requeued(job_id)
    job = cluster.wait_job(job_id, timeout=300)

    log = (out / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-3000:]
    assert job["Restarts"] == "1"
    assert "2 ranks on 2 node(s)" in log and "via torchrun" in log
    match = re.search(r"stopping at step (\d+): SIGUSR1 received", log)
    assert match, log[-3000:]
    stopped = int(match.group(1))
    assert stopped < STEPS  # mid-run, so the resumed job has steps to continue
    assert f"resumed global_step{stopped} at step {stopped}" in log
    assert f"slurm job {job_id}, restart 1" in log
    assert train_losses(out) == train_losses(reference[0])  # the same sequence, bit for bit
    # Both starts log to one wandb run (the id is kept in the checkpoint), with the job's
    # requeue count and id.
    run_id = re.search(r"run (\w+), restarts 1, requeues 1", log).group(1)
    assert f"run {run_id}, restarts 0, requeues 0" in log
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(run.name.endswith(f"-{run_id}") for run in runs)
    resumed = next(runs[1].glob("run-*.wandb")).read_bytes()
    assert b"train/requeues" in resumed and b"train/slurm_job_id" in resumed
    assert {(r["requeues"], r["slurm_job_id"]) for r in records(out) if "split" not in r} == {
        (0, int(job_id)),
        (1, int(job_id)),
    }


def test_wallclock_stops_requeue_until_the_run_is_done(cluster, wikitext, tmp_path):
    out = tmp_path / "run"
    # No warning signal: every start stops itself 25 s after its processes started (about 10
    # of them starting up, the rest training), checkpoints and requeues, until all steps are done.
    # 500 steps take 29 s or more on 2 CPU cores (58 ms a step at the fastest seen; 300 once
    # fitted in one start on an idle machine, CI 2026-12-06): at least one stop even on a
    # machine a fifth faster.
    steps = 500
    args = pretrain_args(out, wikitext, ["train.max_wallclock=25", f"train.max_steps={steps}"])
    sbatch = [*TWO_NODES, "--export=ALL,OMP_NUM_THREADS=1,TXL_LAUNCHER=deepspeed"]
    job_id = cluster.sbatch(out, sbatch, args)
    deadline = time.monotonic() + 600
    restarts_started = 0
    while (job := cluster.job(job_id))["JobState"] not in FINISHED:
        assert time.monotonic() < deadline, f"job {job_id} still {job['JobState']}"
        if job["JobState"] == "PENDING" and int(job["Restarts"]) > restarts_started:
            restarts_started = int(job["Restarts"])
            cluster.start_requeued(job_id)
        time.sleep(0.5)

    log = (out / f"slurm-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-3000:]
    assert "2 ranks on 2 node(s)" in log and "via deepspeed" in log
    stops = [int(s) for s in re.findall(r"stopping at step (\d+): train.max_wallclock", log)]
    print(f"{steps} steps: stopped at {stops}")
    assert stops and int(job["Restarts"]) == len(stops), log[-3000:]
    for stop in stops:
        assert f"resumed global_step{stop} at step {stop}" in log
    # Every step trained exactly once: no step lost to a stop, none repeated after a resume.
    logged = [r["step"] for r in records(out) if "split" not in r]
    assert logged == list(range(1, steps + 1))


def test_killed_rank_restarts_the_step_and_the_job_completes(
    cluster, reference, wikitext, tmp_path
):
    out = tmp_path / "run"
    args = pretrain_args(out, wikitext, ["train.save_interval=5"])
    job_id = cluster.sbatch(out, [*TWO_NODES, "--export=ALL,OMP_NUM_THREADS=1"], args)
    wait_for("the first checkpoint", (out / "checkpoints" / "latest").exists, timeout=180)
    os.kill(rank_pid(out, rank=1), signal.SIGKILL)  # node 2's only rank
    log = completes_in_the_allocation(cluster, out, job_id, "SIGKILL", time.monotonic())
    # The step's status is srun's: 1 from the torchrun whose rank died, or 143 when srun's
    # SIGTERM reaches the other node's torchrun before it has exited.
    assert re.search(r"the training step failed \(exit (1|143)\): restart 1 of 3 on n\[1-2\]", log)
    assert_restarted_and_resumed_exactly(log, out, reference[0])
    trained = [r for r in records(out) if "split" not in r]
    assert {r["requeues"] for r in trained} == {0}  # a restart is not a requeue


def test_killed_rank_without_restarts_fails_the_job_fast(cluster, wikitext, tmp_path):
    out = tmp_path / "run"
    args = pretrain_args(out, wikitext, ["train.save_interval=2"])
    sbatch = [*TWO_NODES, "--export=ALL,OMP_NUM_THREADS=1,TXL_MAX_RESTARTS=0"]
    job_id = cluster.sbatch(out, sbatch, args)
    wait_for("the first checkpoint", (out / "checkpoints" / "latest").exists, timeout=180)
    os.kill(rank_pid(out, rank=1), signal.SIGKILL)  # node 2's only rank
    killed = time.monotonic()
    job = cluster.wait_job(job_id, timeout=60)
    assert time.monotonic() - killed < 60
    assert job["JobState"] == "FAILED" and job["ExitCode"] != "0:0"
    assert job["Restarts"] == "0"  # a failure is not a preemption: no requeue


# A rank that stops answering is found within train.hang_timeout_s; every rank then exits and the
# job restarts the step as for a killed rank.
HANG = ["train.save_interval=5", "train.hang_timeout_s=10"]
FOUND_HUNG = r"rank \d \(node \d, host n\d\) found the run hung \(exit 75\)"


def test_stopped_rank_is_found_hung_and_the_job_completes(cluster, reference, wikitext, tmp_path):
    out = tmp_path / "run"
    args = pretrain_args(out, wikitext, HANG)
    job_id = cluster.sbatch(out, [*TWO_NODES, "--export=ALL,OMP_NUM_THREADS=1"], args)
    wait_for("the first checkpoint", (out / "checkpoints" / "latest").exists, timeout=180)
    os.kill(rank_pid(out, rank=1), signal.SIGSTOP)  # node 2's only rank, alive but silent
    stopped = time.monotonic()
    found = wait_for(
        "rank 0's hang line",
        lambda: "rank 0 hung" in slurm_log(out, job_id) and time.monotonic() - stopped,
        timeout=60,
    )
    log = completes_in_the_allocation(
        cluster, out, job_id, f"SIGSTOP found in {found:.1f} s", stopped
    )
    assert "[txl-dist] rank 0 hung: no progress in " in log
    assert "not answering: rank 1 (last heard " in log
    assert found < 10 + 10  # the timeout, then heartbeats
    assert_restarted_and_resumed_exactly(log, out, reference[0], failed=FOUND_HUNG)


def test_cut_link_is_found_hung_and_the_job_completes_once_it_heals(
    cluster, reference, wikitext, tmp_path
):
    out = tmp_path / "run"
    args = pretrain_args(out, wikitext, HANG)
    job_id = cluster.sbatch(out, [*TWO_NODES, "--export=ALL,OMP_NUM_THREADS=1"], args)
    notes = [out / "errors" / f"exit-rank{rank}.json" for rank in (0, 1)]
    try:
        wait_for("the first checkpoint", (out / "checkpoints" / "latest").exists, timeout=180)
        cluster.set_link("n2", "down")  # n2 loses n1: a network partition
        cut = time.monotonic()
        # Each rank's guard notes its exit on the shared disk; n2's log lines wait for the link.
        found = wait_for(
            "both ranks to exit",
            lambda: all(note.exists() for note in notes) and time.monotonic() - cut,
            timeout=120,
        )
    finally:
        cluster.set_link("n2", "up")
    # The nodes stayed in the allocation: no requeue.
    log = completes_in_the_allocation(
        cluster, out, job_id, f"cut link, exits in {found:.1f} s", cut
    )
    assert "[txl-dist] rank 0 hung: no progress in " in log
    # Rank 1's line reaches the job log through srun across the cut link, which can lose it;
    # the stacks its watchdog dumped are on the shared disk.
    assert "in _dump_stacks" in (out / "errors" / "rank1.txt").read_text()
    assert found < 10 + 10
    assert_restarted_and_resumed_exactly(log, out, reference[0], failed=FOUND_HUNG)


def test_elastic_job_continues_on_the_node_left(cluster, wikitext, tmp_path):
    out = tmp_path / "run"
    overrides = ["train.save_interval=5", "train.keep_last=100"]  # keeps the resumed checkpoint
    sbatch = [*TWO_NODES, "--export=ALL,OMP_NUM_THREADS=1,TXL_ELASTIC=1"]
    job_id = cluster.sbatch(out, sbatch, pretrain_args(out, wikitext, overrides))
    try:
        wait_for("the first checkpoint", (out / "checkpoints" / "latest").exists, timeout=180)
        cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=txl-test")
        log = completes_in_the_allocation(cluster, out, job_id, "n2 down", time.monotonic())
    finally:  # the next tests need both nodes
        cluster.wait_job(job_id, timeout=300)
        cluster.return_to_service("n2")
    assert "node(s) n2 gone: continuing on 1 node(s) (n1), 1 ranks (TXL_ELASTIC=1)" in log
    saved = int(re.search(r"resuming from global_step(\d+) at step \1\n", log).group(1))
    assert "saved on 2 ranks, now 1" in log
    # Every step after the checkpoint trained once more, as one process resuming it does.
    alone = tmp_path / "alone"
    resume = str(out / "checkpoints" / f"global_step{saved}")
    train(alone, wikitext, 1, OVERRIDES, resume=resume, env={"OMP_NUM_THREADS": "1"})
    resumed = {r["step"]: r["loss"] for r in records(out) if r["restart"] and "split" not in r}
    assert list(resumed) == list(range(saved + 1, STEPS + 1))
    assert resumed == train_losses(alone)


# A stand-in for launch/pretrain.py: its first start ends as a straggler stop does (stop file
# naming its node, exit 76); the start after the requeue says where it runs and exits 0.
STRAGGLER_STOP = """
import json, os, sys
stop_file = sys.argv[sys.argv.index("--stop-file") + 1]
node = os.environ["SLURMD_NODENAME"]
if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
    note = dict(step=15, reason="straggler", slurm_job_id=os.environ["SLURM_JOB_ID"], exclude=node)
    with open(stop_file, "w") as f:
        json.dump(note, f)
    sys.exit(76)
print("started again on", node)
"""


def test_a_straggler_stop_requeues_the_job_without_its_node(cluster, tmp_path):
    repo = tmp_path / "repo"
    (repo / "launch").mkdir(parents=True)
    (repo / "launch" / "pretrain.py").write_text(STRAGGLER_STOP)
    out = tmp_path / "run"
    job_id = cluster.sbatch(out, [f"--export=ALL,TXL_LAUNCHER=srun,TXL_REPO={repo}"], [])
    # The helper job excludes the node and releases the job, which then waits for BeginTime.
    wait_for(
        "the requeue without the node",
        lambda: (
            (job := cluster.job(job_id))["JobState"] == "PENDING"
            and job["ExcNodeList"] != "(null)"
            and job
        ),
        timeout=120,
        interval=0.5,
    )
    cluster.start_requeued(job_id)
    job = cluster.wait_job(job_id, timeout=120)
    log = slurm_log(out, job_id)
    first = re.search(r"job \d+ restart 0: .* \((n\d)\) via srun", log).group(1)
    assert f"[txl-slurm] straggler on node(s) {first}: the job goes back to the queue" in log
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", log[-3000:]
    assert job["ExcNodeList"] == first and job["NodeList"] != first
    assert f"started again on {job['NodeList']}" in log
