"""launch/slurm/submit turns options and TXL_* variables into an sbatch line (no cluster)."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import REPO_ROOT

SUBMIT = str(REPO_ROOT / "launch" / "slurm" / "submit")


def sbatch_line(*args: str, **env: str) -> list[str]:
    proc = subprocess.run(
        [SUBMIT, "--dry-run", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return proc.stdout.split()


def test_gpus_give_one_task_per_gpu_and_pretrain_args_pass_through():
    line = sbatch_line(
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--time",
        "24:00:00",
        "--",
        "--config",
        "configs/large.json",
    )
    assert line[0] == "sbatch" and line[-3].endswith("launch/slurm/pretrain.sbatch")
    flags = " ".join(line[1:-3])
    assert "--nodes 4" in flags and "--ntasks-per-node 8 --gpus-per-node 8" in flags
    assert "--cpus-per-task 4" in flags  # not SLURM's one core per GPU rank
    assert "--time 24:00:00" in flags and "--signal B:USR1@300" in flags
    assert "--partition" not in flags and "--account" not in flags
    assert line[-2:] == ["--config", "configs/large.json"]


def test_environment_gives_defaults_and_cpu_fallback():
    line = sbatch_line(
        "--config", "c.json", TXL_TASKS_PER_NODE="2", TXL_PARTITION="cpu", TXL_WARN_S="60"
    )
    flags = " ".join(line)
    assert "--ntasks-per-node 2" in flags and "--gpus-per-node" not in flags
    assert "--partition cpu" in flags and "--signal B:USR1@60" in flags


def test_cores_per_rank_are_asked_for_or_left_to_the_site():
    flags = " ".join(sbatch_line("--gpus-per-node", "8", "--cpus-per-task", "12", "--", "-c"))
    assert "--cpus-per-task 12" in flags
    flags = " ".join(sbatch_line("--gpus-per-node", "8", "--", "-c", TXL_CPUS_PER_TASK="0"))
    assert "--cpus-per-task" not in flags
    assert "--cpus-per-task" not in " ".join(sbatch_line("--", "-c"))  # CPU ranks: as before
    assert "--cpus-per-task 2" in " ".join(sbatch_line("--", "-c", TXL_CPUS_PER_TASK="2"))


def test_without_sbatch_it_says_where_to_run_it(tmp_path):
    """No SLURM here: one line and exit 2, not the shell's raw `sbatch: not found`."""
    tools = tmp_path / "bin"  # every command of the system but sbatch
    tools.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for tool in os.scandir(directory):
            if tool.name != "sbatch" and not (tools / tool.name).exists():
                (tools / tool.name).symlink_to(tool.path)
    proc = subprocess.run(
        [SUBMIT, "--nodes", "1", "--", "--config", "configs/tiny.json"],
        env={**os.environ, "PATH": str(tools)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "submit: sbatch not found: run this on a SLURM login node (or --dry-run to see the line)\n"
    )
