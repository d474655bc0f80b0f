"""A real two-node SLURM cluster (network namespaces on a veth pair), started for these tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration import conftest as integration
from tests.integration.runs import command, records, train_losses
from tests.processes import wait_for

HERE = Path(__file__).parent
NODE_ADDR = {"n1": "10.200.0.1", "n2": "10.200.0.2"}
IFNAME = "txlv0"  # the veth end in both namespaces has this name
STEPS = 40  # long enough (4+ s) that a preemption signal surely lands mid-run
# Short runs; a small final eval; collectives give up quickly when a rank is gone.
OVERRIDES = [f"train.max_steps={STEPS}", "train.eval_rows=64", "train.dist_timeout_s=30"]
wikitext = integration.wikitext  # the prepared data, shared with the integration tests
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def pretrain_args(out_dir: Path, data: Path, overrides: list[str]) -> list[str]:
    """Arguments of launch/pretrain.py for the tiny test run (the interpreter and script cut)."""
    return command(out_dir, data, 1, OVERRIDES + overrides, None)[2:]


def steps_logged(out_dir: Path) -> int:
    try:
        return len(train_losses(out_dir))
    except (OSError, ValueError):  # not written yet, or a line half written
        return 0


@dataclass
class Cluster:
    base: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "SLURM_CONF": str(self.base / "etc" / "slurm.conf"),
            "TXL_PYTHON": sys.executable,
            "TXL_SOCKET_IFNAME": IFNAME,
            **extra,
        }

    def on_node(self, node: str, args: list[str]) -> list[str]:
        """A command line run inside node's network namespace."""
        return ["nsenter", f"--net=/run/netns/txl_{node}", *args]

    def set_link(self, node: str, state: str) -> None:
        """Take node's end of the veth pair "down" (a network partition) or "up" again."""
        subprocess.run(self.on_node(node, ["ip", "link", "set", IFNAME, state]), check=True)

    def return_to_service(self, node: str) -> None:
        """Resume a node set down, unless it is back already (ReturnToService=2 brings a down
        node back when its slurmd registers), and wait until it takes jobs."""
        resume = ["scontrol", "update", f"nodename={node}", "state=resume"]
        subprocess.run(self.on_node("n1", resume), env=self.env(), capture_output=True, timeout=60)
        self.wait_until_idle()

    def wait_until_idle(self) -> None:
        """Until both nodes take jobs: after a cut link slurmctld may hold n2 as not
        responding for a while, and a test that spreads jobs over the nodes needs both."""
        wait_for(
            "both nodes idle",
            lambda: self.run("sinfo", "-h", "-o", "%D %T").strip() == "2 idle",
            timeout=180,
            interval=1.0,
        )

    def run(self, *args: str) -> str:
        proc = subprocess.run(
            self.on_node("n1", list(args)),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"{args}: {proc.stderr}"
        return proc.stdout

    def sbatch(self, out_dir: Path, sbatch_args: list[str], pretrain: list[str]) -> str:
        out_dir.mkdir(parents=True, exist_ok=True)
        script = str(REPO_ROOT / "launch" / "slurm" / "pretrain.sbatch")
        log = f"--output={out_dir}/slurm-%j.out"
        job = self.run("sbatch", "--parsable", log, *sbatch_args, script, *pretrain)
        return job.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """scontrol's view of a job as key -> value."""
        return dict(re.findall(r"(\w+)=(\S*)", self.run("scontrol", "-o", "show", "job", job_id)))

    def start_requeued(self, job_id: str) -> None:
        """Start a requeued job now instead of after its ~150 s BeginTime delay."""
        # slurmd refuses a credential issued in the same second its job was revoked (the
        # requeue): "Job credential revoked". The delay exists for that; 2 s is enough.
        time.sleep(2)
        self.run("scontrol", "update", f"jobid={job_id}", "StartTime=now")

    def wait_job(self, job_id: str, timeout: float) -> dict[str, str]:
        return wait_for(
            f"job {job_id} to finish",
            lambda: (job := self.job(job_id))["JobState"] in FINISHED and job,
            timeout,
            interval=1.0,
        )


# Set to 1 to let these tests apt-get the Debian packages they need where missing (CI does, as
# root); otherwise they skip, saying which packages to install.
INSTALL_ENV = "TXL_TEST_INSTALL_PACKAGES"


def system_packages(commands: dict[str, str]) -> None:
    """The packages that provide `commands` (command -> package) where one is missing: apt-get
    them if INSTALL_ENV asks, else skip the test saying so; a failed install skips, saying why
    (no network, say)."""
    missing = sorted({pkg for cmd, pkg in commands.items() if shutil.which(cmd) is None})
    if not missing:
        return
    names = " ".join(missing)
    if os.environ.get(INSTALL_ENV) != "1":
        pytest.skip(f"needs {names}: install them, or set {INSTALL_ENV}=1 to have the tests do it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for apt in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *missing]):
        try:
            proc = subprocess.run(apt, env=env, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            pytest.skip(f"could not install {names}: {' '.join(apt)}: {err}")
        if proc.returncode != 0:
            said = [line for line in proc.stderr.splitlines() if line.startswith(("E:", "W:"))]
            pytest.skip(f"could not install {names}: {(said or [proc.stderr.strip()])[-1]}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """munged, slurmctld and slurmd on nodes n1 and n2; always stopped after the session."""
    if os.geteuid() != 0:
        pytest.skip("the SLURM tests start daemons and network namespaces: run them as root")
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("the SLURM tests need `ip netns` and nsenter (iproute2, util-linux)")
    system_packages({"slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "munged": "munge"})
    base = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "BASE": str(base)}
    subprocess.run([HERE / "cluster_down.sh"], env=env, timeout=60)  # namespaces left by a crash
    try:
        up = subprocess.run(
            [HERE / "cluster_up.sh"], env=env, capture_output=True, text=True, timeout=600
        )
        assert up.returncode == 0, up.stdout + up.stderr
        yield Cluster(base)
    finally:
        subprocess.run([HERE / "cluster_down.sh"], env=env, timeout=60)


@pytest.fixture(scope="session")
def reference(cluster, wikitext, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """An uninterrupted 1 node x 2 task SLURM job, ranks started by srun itself: its run
    directory and final job record."""
    out = tmp_path_factory.mktemp("slurm-reference")
    sbatch = ["--ntasks-per-node=2", "--export=ALL,TXL_LAUNCHER=srun"]
    job_id = cluster.sbatch(out, sbatch, pretrain_args(out, wikitext, []))
    return out, cluster.wait_job(job_id, timeout=300)


def assert_restarted_and_resumed_exactly(
    log: str,
    out: Path,
    reference: Path,
    failed: str = r"rank 1 \(node 1, host n2\) was killed by SIGKILL",
) -> None:
    """Rank 0's first line after the restart names the first rank that ended and how (`failed`,
    a regex), and the checkpoint it resumes from; every step after that checkpoint trained
    exactly once more, with the uninterrupted `reference` run's losses."""
    line = re.search(
        rf"restart 1 of at most 3: {failed} .*; resuming from global_step(\d+) at step \1\n", log
    )
    assert line, log[-3000:]
    saved = int(line.group(1))
    resumed = {r["step"]: r["loss"] for r in records(out) if r["restart"] and "split" not in r}
    assert list(resumed) == list(range(saved + 1, STEPS + 1))
    assert resumed == {s: loss for s, loss in train_losses(reference).items() if s > saved}
