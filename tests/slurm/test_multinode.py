"""launch/multinode.sh without SLURM, one launcher per namespace node (torchrun or DeepSpeed's
--no_ssh): 2 nodes x 1 rank give the 1 node x 2 rank losses, and a killed rank fails the whole
job fast and resumes after."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.runs import train_losses
from tests.slurm.conftest import NODE_ADDR, pretrain_args, rank_pid, wait_for

MULTINODE = str(REPO_ROOT / "launch" / "multinode.sh")
PORTS = itertools.count(29533)  # a fresh rendezvous port for every launch


def launch(
    cluster, out: Path, data: Path, overrides: list[str], name: str, launcher: str = "torchrun"
) -> list:
    """Start launch/multinode.sh in n1 (node 0) and n2 (node 1); logs go to out/{name}-nodeN.log."""
    out.mkdir(parents=True, exist_ok=True)
    port = str(next(PORTS))
    procs = []
    for node_rank, node in enumerate(NODE_ADDR):
        env = cluster.env(
            TXL_NNODES="2",
            TXL_NODE_RANK=str(node_rank),
            TXL_MASTER_ADDR=NODE_ADDR["n1"],
            TXL_MASTER_PORT=port,
            TXL_NPROC_PER_NODE="1",
            TXL_LAUNCHER=launcher,
            OMP_NUM_THREADS="1",  # the two "nodes" share the cores (and match the 1-node run)
        )
        with open(out / f"{name}-node{node_rank}.log", "w") as log:
            procs.append(
                subprocess.Popen(
                    cluster.on_node(node, [MULTINODE, *pretrain_args(out, data, overrides)]),
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # so that a timeout can stop the launcher and its ranks
                )
            )
    return procs


def finish(procs: list, timeout: float) -> list[int]:
    """Exit codes of all launchers; on timeout the stragglers' process groups are killed."""
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(0.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_two_nodes_match_one_node(cluster, reference, wikitext, tmp_path, launcher):
    codes = finish(launch(cluster, tmp_path, wikitext, [], "run", launcher), timeout=300)
    assert codes == [0, 0], (tmp_path / "run-node0.log").read_text()[-3000:]
    # Same seed, rows and two-rank reductions: the same losses bit for bit.
    assert train_losses(tmp_path) == train_losses(reference[0])


def test_killed_rank_fails_all_nodes_fast_then_resume_continues(
    cluster, reference, wikitext, tmp_path
):
    overrides = ["train.save_interval=2"]
    procs = launch(cluster, tmp_path, wikitext, overrides, "killed")
    latest = tmp_path / "checkpoints" / "latest"
    wait_for("the first checkpoint", latest.exists, timeout=180)
    os.kill(rank_pid(tmp_path, rank=1), signal.SIGKILL)  # node 1's only rank
    killed = time.monotonic()
    codes = finish(procs, timeout=60)
    assert all(code != 0 for code in codes) and time.monotonic() - killed < 60
    saved = int(latest.read_text().strip().removeprefix("global_step"))

    codes = finish(launch(cluster, tmp_path, wikitext, overrides, "resumed"), timeout=300)
    log = (tmp_path / "resumed-node0.log").read_text()
    assert codes == [0, 0], log[-3000:]
    assert f"resumed global_step{saved} at step {saved}" in log
    assert train_losses(tmp_path) == train_losses(reference[0])
