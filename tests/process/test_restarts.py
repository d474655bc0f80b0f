"""The guard of a rank under a launcher that restarts (txl_dist/process/restarts.py), with real
processes: a rank killed by a signal leaves a note, and the next start's rank 0 turns it into
its line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import processes
from tests.cli.startups import start_ups, tiny
from tests.conftest import REPO_ROOT
from txl_dist.process import restarts

# A "rank" under the guard: it tells the guard its run directory, then dies of `signal`.
RANK = """
import os, signal, sys
from txl_dist.process import restarts
restarts.guard_if_restarting()
restarts.tell_guard(sys.argv[1])
print(os.getpid(), os.getppid(), flush=True)
os.kill(os.getpid(), getattr(signal, sys.argv[2]))
"""


def run_rank(tmp_path, signal_name: str, **env: str) -> subprocess.CompletedProcess:
    return processes.run(
        [sys.executable, "-c", RANK, str(tmp_path), signal_name],
        timeout=60,
        env={**os.environ, "RANK": "1", "GROUP_RANK": "1", **env},
        cwd=REPO_ROOT,
    )


def test_a_killed_rank_ends_its_guard_alike_and_leaves_a_note_for_the_next_start(
    tmp_path, monkeypatch
):
    proc = run_rank(tmp_path, "SIGKILL", TXL_MAX_RESTARTS="3", SLURMD_NODENAME="n2")
    assert proc.returncode == -9, proc.stderr  # the launcher sees the rank's own end
    _, its_parent = map(int, proc.stdout.split())
    assert its_parent != os.getpid()  # the rank was the guard's child, not ours
    (path,) = tmp_path.glob("errors/exit-rank*.json")
    assert path.name == "exit-rank1.json"
    note = json.loads(path.read_text())
    assert (note["rank"], note["node"], note["host"], note["returncode"]) == ("1", "1", "n2", -9)

    # Rank 0's own launcher may not count the restart (another node's did): the note tells.
    monkeypatch.delenv("TXL_RESTART", raising=False)
    monkeypatch.setenv("TXL_MAX_RESTARTS", "3")
    line = restarts.restart_line(restarts.take_exit_notes(str(tmp_path)), "global_step4 at step 4")
    assert line.startswith("restart 1 of at most 3: rank 1 (node 1, host n2) was killed by SIGKILL")
    assert line.endswith("s ago; resuming from global_step4 at step 4")
    assert not list(tmp_path.glob("errors/exit-rank*.json"))  # told once


def test_an_exit_note_is_never_written_through_a_planted_link(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "errors").mkdir()
    os.symlink(victim, tmp_path / "errors" / "exit-rank1.json.tmp")
    note = tmp_path / "note"
    note.write_text(str(tmp_path))  # what the rank tells its guard: its run directory
    monkeypatch.setenv("RANK", "1")
    restarts._write_exit_note(str(note), -9)
    assert victim.read_text() == "precious"
    assert json.loads((tmp_path / "errors" / "exit-rank1.json").read_text())["returncode"] == -9


@pytest.mark.parametrize("env", [{}, {"TXL_MAX_RESTARTS": "0"}])
def test_without_restarts_the_rank_runs_unguarded(tmp_path, env):
    proc = run_rank(tmp_path, "SIGTERM", **env)
    assert proc.returncode == -15
    _, its_parent = map(int, proc.stdout.split())
    assert its_parent == os.getpid()  # no guard between us and the rank
    assert not (tmp_path / "errors").exists()


def test_how_a_rank_ended_names_signals_hangs_and_exit_codes():
    assert restarts.how_it_ended(-9) == "was killed by SIGKILL"
    assert restarts.how_it_ended(-999) == "was killed by signal 999"  # a planted note's
    assert restarts.how_it_ended(75) == "found the run hung (exit 75)"  # its watchdog's exit
    assert restarts.how_it_ended(1) == "exited with code 1"


LAUNCHER_TYPOS = [("TXL_MAX_RESTARTS", "three"), ("TXL_RESTART", "1st"), ("LOCAL_WORLD_SIZE", "-2")]
# Read by launch/pretrain.py's preamble, before torch's import: a real start of its own. The
# others are read in main() after the imports: their start-ups share one process.
READ_BY_THE_PREAMBLE = "TXL_MAX_RESTARTS"


@pytest.fixture(scope="module")
def read_in_main(tmp_path_factory) -> dict:
    """{variable: how launch/pretrain.py's start-up with its typo ended}, in one process."""
    out = tmp_path_factory.mktemp("typos") / "run"
    argv = tiny("model.n_token=267735", f"train.out_dir={out}")
    typos = [(name, value) for name, value in LAUNCHER_TYPOS if name != READ_BY_THE_PREAMBLE]
    ended = start_ups([(argv, {name: value}) for name, value in typos])
    return {name: end for (name, _), end in zip(typos, ended)}


@pytest.mark.parametrize("name, value", LAUNCHER_TYPOS)
def test_a_launcher_variable_that_is_no_number_is_named_in_one_line(request, tmp_path, name, value):
    if name == READ_BY_THE_PREAMBLE:
        args = [sys.executable, "launch/pretrain.py", "--config", "configs/tiny.json"]
        args += ["--set", "model.n_token=267735", "--set", f"train.out_dir={tmp_path / 'run'}"]
        env = {**os.environ, "TXL_SET": "", name: value}
        proc = processes.run(args, timeout=120, cwd=REPO_ROOT, env=env)
    else:
        proc = request.getfixturevalue("read_in_main")[name]
        assert proc.process_stderr == "", proc.process_stderr[-3000:]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == (
        f"config error: environment variable {name}={value!r} is not a whole number >= 0: "
        "set it to one or unset it\n"
    )


def test_exit_notes_planted_in_a_received_run_directory_are_named_and_left_out(
    tmp_path, monkeypatch, capsys
):
    errors = tmp_path / "errors"
    errors.mkdir()
    good = dict(rank="1", node="0", host="h", returncode=-9, next_restart=1, time=1.0)
    (errors / "exit-rank1.json").write_text(json.dumps(good))
    (errors / "exit-rank2.json").symlink_to("/dev/zero")  # read whole, it would never end
    os.mkfifo(errors / "exit-rank3.json")  # opened for reading, it would block the start
    (errors / "exit-rank4.json").write_text("[1, 2]")
    (errors / "exit-rank5.json").write_text(json.dumps({**good, "time": "late"}))
    (errors / "exit-rank6.json").write_text('{"rank": ')
    monkeypatch.setenv("TXL_MAX_RESTARTS", "3")

    notes = restarts.take_exit_notes(str(tmp_path))

    assert notes == [good]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all(
        line.startswith("txl-dist: exit note left out: ") for line in lines
    )
    for rank, why in [
        (2, "link"),
        (3, "regular file"),
        (4, "not an object"),
        (5, "'time'"),
        (6, "JSON"),
    ]:
        (line,) = [line for line in lines if f"exit-rank{rank}.json" in line]
        assert why in line, line
    assert not list(errors.iterdir())  # each told (or named) once
