"""Multi-node without SLURM on the namespace nodes: launch/multinode.sh, one launcher per node
(torchrun or DeepSpeed's --no_ssh), and DeepSpeed's launcher over ssh from a hostfile (an sshd in
each node): 2 nodes x 1 rank give the 1 node x 2 rank losses; after a killed rank both nodes'
torchruns start their ranks again by themselves and the run resumes exactly; a cut link between
the nodes ends the ranks of both within the hang timeout."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.runs import rank_pid, train_losses
from tests.processes import wait_for
from tests.slurm.conftest import (
    IFNAME,
    NODE_ADDR,
    assert_restarted_and_resumed_exactly,
    pretrain_args,
    steps_logged,
    system_packages,
)

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


def test_killed_rank_restarts_every_node_and_resumes_exactly(
    cluster, reference, wikitext, tmp_path
):
    procs = launch(cluster, tmp_path, wikitext, ["train.save_interval=5"], "killed")
    wait_for("the first checkpoint", (tmp_path / "checkpoints" / "latest").exists, timeout=180)
    os.kill(rank_pid(tmp_path, rank=1), signal.SIGKILL)  # node 1's only rank
    codes = finish(procs, timeout=300)  # both torchruns start their ranks again by themselves
    log = (tmp_path / "killed-node0.log").read_text()
    assert codes == [0, 0], log[-3000:]
    failed = r"rank 1 \(node 1, host \S+\) was killed by SIGKILL"
    assert_restarted_and_resumed_exactly(log, tmp_path, reference[0], failed)


def test_a_cut_link_ends_the_ranks_of_both_nodes_within_the_hang_timeout(
    cluster, wikitext, tmp_path
):
    overrides = ["train.max_steps=100000", "train.hang_timeout_s=10", "train.dist_timeout_s=300"]
    procs = launch(cluster, tmp_path, wikitext, overrides, "cut")

    logs = [tmp_path / f"cut-node{node_rank}.log" for node_rank in (0, 1)]
    try:
        wait_for("training", lambda: steps_logged(tmp_path) >= 3, timeout=180)
        cluster.set_link("n2", "down")  # n2 loses n1: a network partition
        cut = time.monotonic()
        hung = wait_for(
            "both ranks' hang lines",
            lambda: all(" hung: " in log.read_text() for log in logs) and time.monotonic() - cut,
            timeout=120,
        )
    finally:
        cluster.set_link("n2", "up")
        with contextlib.suppress(subprocess.TimeoutExpired):
            finish(procs, timeout=0)  # what the launchers do next is the restart's business
    print(f"cut link: both ranks ended within {hung:.1f} s")
    node0, node1 = (log.read_text() for log in logs)
    assert "[txl-dist] rank 0 hung: no progress in " in node0
    assert "not answering: rank 1 (last heard " in node0
    assert "[txl-dist] rank 1 hung: no progress in " in node1
    # With restarts on, multinode.sh gives each start a fresh store (torchrun does not share its
    # rendezvous store with the ranks): rank 0 holds it, across the cut link from node 1.
    assert "rank 0 (store host) not answering" in node1
    assert hung < 10 + 10  # the timeout, heartbeats and a read that gets no answer


@pytest.fixture
def ssh_nodes(cluster, tmp_path) -> Iterator[dict[str, str]]:
    """An sshd in each node that takes a fresh key; yields the environment that uses it."""
    system_packages({"sshd": "openssh-server", "pdsh": "pdsh"})
    keys = tmp_path / "ssh"
    keys.mkdir(mode=0o700)
    for key in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", keys / key], check=True
        )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    daemons = []
    try:
        for node, addr in NODE_ADDR.items():
            config = keys / f"sshd-{node}.conf"
            config.write_text(
                f"ListenAddress {addr}\nHostKey {keys / 'host'}\nPidFile none\n"
                f"AuthorizedKeysFile {keys / 'client.pub'}\nPermitRootLogin prohibit-password\n"
                "StrictModes no\nUsePAM no\n"
            )
            # -D: stays in the foreground, a child of ours to stop after.
            daemons.append(subprocess.Popen(cluster.on_node(node, [sshd, "-D", "-f", str(config)])))
        # DeepSpeed and pdsh run `ssh` from PATH: this one uses the key and trusts the test's hosts,
        # without touching the user's ~/.ssh.
        (keys / "ssh_config").write_text(
            f"IdentityFile {keys / 'client'}\nStrictHostKeyChecking no\n"
            "UserKnownHostsFile /dev/null\nLogLevel ERROR\n"
        )
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "ssh").write_text(
            f'#!/bin/sh\nexec /usr/bin/ssh -F {keys / "ssh_config"} "$@"\n'
        )
        (bin_dir / "ssh").chmod(0o755)
        for addr in NODE_ADDR.values():
            login = cluster.on_node("n1", [str(bin_dir / "ssh"), addr, "true"])
            wait_for(f"sshd at {addr}", lambda cmd=login: subprocess.run(cmd).returncode == 0, 30)
        # Variables for the remote ranks go through DeepSpeed's environment file.
        (keys / "deepspeed_env").write_text(f"GLOO_SOCKET_IFNAME={IFNAME}\nOMP_NUM_THREADS=1\n")
        yield {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "DS_ENV_FILE": str(keys / "deepspeed_env"),
        }
    finally:
        for daemon in daemons:
            daemon.terminate()
            daemon.wait()


def test_deepspeed_over_ssh_matches_one_node(cluster, reference, wikitext, ssh_nodes, tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{addr} slots=1\n" for addr in NODE_ADDR.values()))
    deepspeed = [sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", str(hostfile)]
    deepspeed += ["--master_addr", NODE_ADDR["n1"], "--master_port", str(next(PORTS))]
    args = [*deepspeed, str(REPO_ROOT / "launch" / "pretrain.py"), "--resume", "auto"]
    args += pretrain_args(tmp_path, wikitext, [])
    with open(tmp_path / "ssh.log", "w") as log:
        proc = subprocess.Popen(
            cluster.on_node("n1", args),
            env=cluster.env(**ssh_nodes),
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (code,) = finish([proc], timeout=300)
    log = (tmp_path / "ssh.log").read_text()
    assert code == 0, log[-3000:]
    assert f"pdsh -S -f 1024 -w {NODE_ADDR['n1']},{NODE_ADDR['n2']}" in log  # over ssh
    assert f"{NODE_ADDR['n2']}: " in log  # pdsh prefixes what node 2's launcher printed
    assert train_losses(tmp_path) == train_losses(reference[0])
