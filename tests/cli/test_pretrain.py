"""The pretrain command: a traceback is never written through a planted link; launch/pretrain.py
gives torch huge pages."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests import processes
from tests.cli.startups import start_ups, tiny
from tests.cli.test_export import received
from tests.conftest import REPO_ROOT
from tests.integration.runs import PROCESS_GROUP_BEGAN
from txl_dist.cli.pretrain import _keep_traceback
from txl_dist.process.dist import World


def test_a_traceback_is_never_written_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "errors").mkdir()
    os.symlink(victim, tmp_path / "errors" / "rank2.txt")
    assert _keep_traceback("Traceback ...", str(tmp_path), World(2, 4, 0)).startswith("traceback:")
    assert victim.read_text() == "precious"
    assert (tmp_path / "errors" / "rank2.txt").read_text() == "Traceback ..."


# After launch/pretrain.py's preamble (run_name other than __main__: no training), fault in a
# 64 MB tensor and count the page faults it took.
FAULTS = """
import resource, runpy
runpy.run_path("launch/pretrain.py", run_name="preamble")
import torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(16 * 2**20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(*envs: dict[str, str]) -> list[int]:
    """FAULTS's count in one process per environment change, all started at once."""
    command = [sys.executable, "-c", FAULTS]
    envs = [{**os.environ, **env} for env in envs]
    ended = processes.run_at_once([command] * len(envs), 120, envs, cwd=REPO_ROOT)
    for proc in ended:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return [int(proc.stdout.split()[-1]) for proc in ended]


@pytest.mark.skipif(
    "[never]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text(),
    reason="this kernel gives no transparent huge pages",
)
def test_training_gives_torch_huge_pages_unless_told_not_to(monkeypatch):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    small_pages, default = page_faults({"THP_MEM_ALLOC_ENABLE": "0"}, {})
    assert small_pages > 16_000  # 64 MB in 4 KB pages
    assert default < small_pages / 8


# Mix weights that cannot be normalized, and how their refusal begins.
MIX_REFUSALS = {
    ("Infinity", "1"): r"data\.mix\[0\]\.weight must be a finite number > 0, got inf",
    ("1e308", "1e308"): r"data\.mix weights \(1e\+308, 1e\+308\) sum to inf",
    ("5e-324", "5e-324"): r"data\.mix weights \(5e-324, 5e-324\) sum to 1e-323",
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict:
    """The start-ups below, all in one process: {case: (how it ended, its train.out_dir)}."""
    root, cases = tmp_path_factory.mktemp("refused"), {}
    # One process told by the launcher's variables that it is rank 0 of 2: the plan refuses
    # before anything else happens (no run directory, no process group waiting for rank 1).
    out = root / "eval_rows"
    argv = tiny("model.n_token=12000", f"train.out_dir={out}", "train.eval_rows=7",
                options=("--verbose",))  # fmt: skip
    cases["eval_rows"] = (argv, {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, out)
    for i, weights in enumerate(MIX_REFUSALS):
        out = root / f"mix{i}"
        corpora = [
            f'{{"name": "{n}", "path": "{n}", "weight": {w}}}' for n, w in zip("ab", weights)
        ]
        mix = f"[{', '.join(corpora)}]"  # JSON's Infinity too, as --set reads it
        argv = tiny(
            "data.path=null", f"data.mix={mix}", "model.n_token=12000", f"train.out_dir={out}"
        )
        cases[weights] = (argv, {}, out)
    ended = start_ups([(argv, env) for argv, env, _ in cases.values()])
    return {case: (end, out) for (case, (*_, out)), end in zip(cases.items(), ended)}


def test_evaluation_rows_that_do_not_split_over_the_ranks_are_refused_at_start_up(refused):
    proc, out = refused["eval_rows"]
    assert proc.returncode == 2 and proc.process_stderr == "", proc.stderr[-3000:]
    assert proc.stderr == (
        "config error: train.eval_rows=7 must be a multiple of the world size 2; set "
        "train.eval_rows to a multiple of 2 (e.g. 8)\n"
    )
    assert PROCESS_GROUP_BEGAN not in proc.stdout + proc.process_stdout and not out.exists()


@pytest.mark.parametrize("weights", MIX_REFUSALS)
def test_mix_weights_that_cannot_be_normalized_are_refused_at_start_up(refused, weights):
    proc, out = refused[weights]
    assert proc.returncode == 2 and proc.process_stderr == "", proc.stderr[-3000:]
    assert re.fullmatch(rf"config error: {MIX_REFUSALS[weights]}[^\n]*\n", proc.stderr), proc.stderr
    assert not out.exists()


# What a received checkpoint may hold, and how --resume's refusal of it reads.
PLANTED = {
    "world_size": "is damaged: txl.json records world_size 1000000000, its files are those",
    "sparse tokenizer": "tokenizer.json holds more than TXL_MAX_TOKENIZER_BYTES=134217728",
    "link to /": "zero: refused, a link in a checkpoint, which txl-dist never writes",
    "fifo txl.json": "txl.json is not a regular file (a FIFO, device or directory)",
}


def plant(tag: Path, what: str) -> None:
    """Plant `what` (a PLANTED key) in the checkpoint `tag`."""
    if what == "world_size":
        record = json.loads((tag / "txl.json").read_text())
        (tag / "txl.json").write_text(json.dumps({**record, "world_size": 10**9}))
    elif what == "sparse tokenizer":
        with open(tag / "tokenizer.json", "wb") as f:
            f.truncate(5 << 30)
    elif what == "link to /":
        os.symlink("/", tag / "zero")
    else:
        (tag / "txl.json").unlink()
        os.mkfifo(tag / "txl.json")


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    """{planted: how --resume of a received checkpoint holding it ended}, in one process."""
    model = ["model.n_token=1465", "model.cutoffs=[]", "model.tie_projs=[false]", "model.div_val=1"]
    cases = []
    for what in PLANTED:
        root = tmp_path_factory.mktemp("received")
        tag, _ = received(root)
        plant(tag, what)
        settings = [f"train.out_dir={root / 'out'}", "logging.wandb.mode=disabled", *model]
        cases.append((tiny(*settings, options=("--resume", tag)), {}))
    return dict(zip(PLANTED, start_ups(cases)))


@pytest.mark.slow
@pytest.mark.parametrize("planted", PLANTED)
def test_resume_of_a_received_checkpoint_checks_its_files_and_numbers_first(resumed, planted):
    """--resume of a real checkpoint someone sent: world_size 10**9 built 10**9 paths, a link
    to / made the pickle scan walk the file system, a FIFO blocked start-up (SIGTERM ignored),
    a 5 GB sparse tokenizer.json was read whole. Each is one line before any process group."""
    proc = resumed[planted]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.process_stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("checkpoint error: ") and PLANTED[planted] in last
