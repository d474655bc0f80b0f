"""Launching real training runs of the tiny config and reading their results back."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests import processes
from tests.conftest import REPO_ROOT
from txl_dist.process.restarts import GUARD_NOTE_ENV

DEEPSPEED = str(Path(sys.executable).parent / "deepspeed")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
PRETRAIN = str(REPO_ROOT / "launch" / "pretrain.py")
# launch/pretrain.py that also saves the engine's optimizer state when it starts and ends
PRETRAIN_DUMPING = str(Path(__file__).with_name("pretrain_dumping.py"))
# launch/pretrain.py whose save of step $TXL_TEST_PAUSE_IN_SAVE stops inside, after the write
PRETRAIN_PAUSING = str(Path(__file__).with_name("pretrain_pausing.py"))
# What a CPU rank prints as its process group starts (DeepSpeed loads its shared-memory op then);
# DeepSpeed's own "Initializing TorchBackend" is not logged for a store-file rendezvous.
PROCESS_GROUP_BEGAN = "deepspeed_shm_comm_op built successfully"
STEPS = 30  # training steps of each ZeRO-stage run
K = 6  # steps before the interruption in the resume tests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Quiet, short runs: a log row per step, no periodic eval/save, a short warm-up.
TEST_SETTINGS = [
    "data.test_split=null",
    "logging.log_interval=1",
    "logging.wandb.mode=disabled",
    "train.eval_interval=0",
    "train.save_interval=0",
    "optim.warmup_steps=5",
    "optim.lr=0.001",  # a fast first drop for 30-step runs (the tiny config's 2.5e-4 is for 1000)
]


def command(
    out_dir: Path,
    data: Path,
    nprocs: int,
    overrides: list[str],
    resume: str | None,
    script: str = PRETRAIN,
    launcher: str = "deepspeed",
):
    """`python` for one process, else `deepspeed` (or `torchrun`) with nprocs ranks."""
    settings = [f"data.path={data}", f"train.out_dir={out_dir}", *TEST_SETTINGS, *overrides]
    args = ["--config", str(REPO_ROOT / "configs" / "tiny.json")]
    args += [arg for setting in settings for arg in ("--set", setting)]
    if resume:
        args += ["--resume", resume]
    if nprocs == 1:
        return [sys.executable, script, *args]
    port = str(free_port())
    if launcher == "torchrun":
        return [TORCHRUN, "--nproc_per_node", str(nprocs), "--master_port", port, script, *args]
    return [DEEPSPEED, "--num_gpus", str(nprocs), "--master_port", port, script, *args]


def train(
    out_dir,
    data,
    nprocs=2,
    overrides=(),
    resume=None,
    timeout=900,
    script=PRETRAIN,
    env=None,
    extra_args=(),
) -> subprocess.CompletedProcess:
    for _ in range(3):
        proc = processes.run(
            command(out_dir, data, nprocs, list(overrides), resume, script) + list(extra_args),
            timeout=timeout,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
        )
        # The launcher cannot bind port 0 for its ranks: another process may take the free port
        # we picked before rank 0 binds it. Then nothing has started yet; pick another.
        if "EADDRINUSE" not in proc.stderr + proc.stdout:
            break
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def records(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def train_losses(out_dir: Path) -> dict[int, float]:
    rows = [r for r in records(out_dir) if "event" not in r]  # stragglers, rollbacks: no losses
    return {r["step"]: r["loss"] for r in rows if "split" not in r and "loss" in r}


def eval_ppl(out_dir: Path, split: str = "valid") -> float:
    return [r for r in records(out_dir) if r.get("split") == split][-1]["ppl"]


@contextlib.contextmanager
def training_after(cmd: list[str], out: Path, steps: int):
    """The launcher of `cmd` in its own process group (a terminal's foreground job), once it
    has logged `steps` training steps; its output is on the pipe."""
    with processes.process_group(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT
    ) as launcher:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() or len(train_losses(out)) < steps:
            assert time.monotonic() < deadline and launcher.poll() is None, "training did not start"
            time.sleep(0.1)
        yield launcher


def rank_pid(out: Path, rank: int) -> int:
    """The training process of global rank `rank` of the run writing to out (under a launcher
    that restarts, the guarded child, not its guard: txl_dist/process/restarts.py)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = dict(
                line.split(b"=", 1)
                for line in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if b"=" in line
            )
        except OSError:  # exited meanwhile
            continue
        # The launchers (the batch shell, srun, torchrun, deepspeed's runner) carry the same
        # arguments; a rank is a python running the script: its rank is RANK from a launcher
        # or, started by srun itself, SLURM_PROCID.
        is_rank = Path(cmdline[0].decode()).name.startswith("python") and b"-m" not in cmdline
        mine = is_rank and f"train.out_dir={out}".encode() in cmdline
        if mine and environ.get(b"RANK", environ.get(b"SLURM_PROCID")) == str(rank).encode():
            found.append((GUARD_NOTE_ENV.encode() in environ, int(pid)))
    assert found, f"no process of rank {rank} for {out}"
    return max(found)[1]  # a guarded rank over its guard
