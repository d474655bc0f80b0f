"""Real runs (ZeRO 0, 2, 3) with secrets leave no trace of them; poisoned checkpoints are refused.

Each stage trains one step on one rank from an HTTP server, with a password in data.path, a
bearer token in data.storage_options and an API key in the deepspeed section, wandb offline;
then resumes to step 2 with the secrets given again on the command line (the checkpoint holds
them redacted), and is exported. Every file of the run, wandb and export directories and every
captured output is searched for the secrets. Copies of the checkpoints with a code-running
pickle are then refused by resume and export before anything is unpickled.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from data_pipeline.cli import main as prepare_main
from tests import processes
from tests.cli.startups import Ended, start_ups
from tests.conftest import REPO_ROOT
from tests.data_pipeline.conftest import RangeServer
from tests.integration.runs import PRETRAIN
from txl_dist.cli.export import export
from txl_dist.engine.checkpoint import CLIENT_FILE, CheckpointState, digests, load_trusted
from txl_dist.engine.checkpoint.consolidate import ExportError

STAGES = (0, 2, 3)
PASSWORD, TOKEN = "pw-Zq81SECRET", "tok-Hx27SECRET"
API_KEY = "key-Cw55SECRET"  # in the deepspeed section, which DeepSpeed keeps in its checkpoints
SECRETS = (PASSWORD, TOKEN, API_KEY)


class Payload:
    """Unpickling this runs `touch MARKER`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def server(shared_data, tmp_path_factory):
    """A small WikiText-103 prefix (quick to evaluate), prepared and served over HTTP."""
    root = tmp_path_factory.mktemp("untrusted")
    source = root / "source"
    source.mkdir()
    for name, size in (("wiki.train.tokens", 200_000), ("wiki.valid.tokens", 20_000)):
        with open(shared_data / "wikitext-103" / name, "rb") as f:
            (source / name).write_bytes(f.read(size))
    argv = ["--dataset", "wikitext-103", "--source", str(source), "--out", str(root / "small")]
    assert prepare_main(argv) == 0
    with contextlib.ExitStack() as stack:
        yield RangeServer(root, root / "http.log", stack), root / "small"


def pretrain(out_dir: Path, data_url: str, stage: int, steps: int) -> subprocess.CompletedProcess:
    n_token = len((out_dir.parent / "vocab.txt").read_text().splitlines())
    options = json.dumps({"headers": {"X-Api-Token": TOKEN}})
    settings = [
        f"data.path={data_url}",
        f"data.storage_options={options}",
        f"deepspeed.comet={json.dumps({'enabled': False, 'api_key': API_KEY})}",
        f"train.out_dir={out_dir}",
        f"deepspeed.zero_optimization.stage={stage}",
        f"model.n_token={n_token}",
        "model.cutoffs=[2000,4000]",
        f"train.max_steps={steps}",
        "train.global_rows=4",
        "data.test_split=null",
        "train.eval_interval=0",
        "train.save_interval=1",
        "logging.log_interval=1",
        "logging.wandb.mode=offline",
    ]
    args = [sys.executable, PRETRAIN, "--config", str(REPO_ROOT / "configs" / "tiny.json")]
    args += [a for s in settings for a in ("--set", s)] + ["--resume", "auto"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = processes.run(args, timeout=600, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def runs(server, tmp_path_factory) -> dict[int, tuple[Path, Path, str]]:
    """stage -> (run dir, export dir, all captured output) of a 1 + 1 step run with secrets."""
    http, data = server
    url = http.url.replace("http://", f"http://reader:{PASSWORD}@") + "/small"
    dirs = {stage: tmp_path_factory.mktemp(f"secret-zero{stage}") for stage in STAGES}
    for run in dirs.values():
        shutil.copy(data / "vocab.txt", run / "vocab.txt")  # read by pretrain() for n_token

    def first_and_resumed(stage: int) -> tuple[subprocess.CompletedProcess, ...]:
        out = dirs[stage] / "run"
        return pretrain(out, url, stage, 1), pretrain(out, url, stage, 2)

    # One process at a time per stage, mostly starting up on one core: the stages side by side.
    with ThreadPoolExecutor(len(STAGES)) as side_by_side:
        started = dict(zip(STAGES, side_by_side.map(first_and_resumed, STAGES)))
    result = {}
    for stage, (first, resumed) in started.items():
        run, out = dirs[stage], dirs[stage] / "run"
        assert "resumed global_step1 at step 1" in resumed.stdout
        exported = run / "export"
        export(str(out), str(exported), vocab_path=str(data / "vocab.txt"))
        logs = "".join(p.stdout + p.stderr for p in (first, resumed))
        result[stage] = (out, exported, logs)
    return result


@pytest.mark.parametrize("stage", STAGES)
def test_secrets_reach_no_file_and_no_output(runs, stage):
    out, exported, logs = runs[stage]
    files = [p for d in (out, exported) for p in d.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files) and any(p.suffix == ".pt" for p in files)
    for secret in SECRETS:
        assert secret not in logs
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{secret} in {path}"
    saved = json.loads((out / "config.json").read_text())["data"]
    assert saved["storage_options"] == {"headers": {"X-Api-Token": "***"}}
    assert saved["path"].startswith("http://***@127.0.0.1:")


def poisoned_copy(out: Path, stage: int, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the run whose latest checkpoint carries a code-running pickle; and its marker."""
    copy = Path(shutil.copytree(out, tmp_path / "received", ignore=shutil.ignore_patterns("wandb")))
    tag = copy / "checkpoints" / "global_step2"
    # ZeRO 0: the module weights; ZeRO 2/3: DeepSpeed's optimizer partition.
    pattern = "mp_rank_00_model_states.pt" if stage == 0 else "*optim_states.pt"
    (target,) = tag.glob(pattern)
    state = load_trusted(str(target))  # mmapped: the poisoned copy replaces, never overwrites
    marker = tmp_path / "pwned"
    state["extra"] = Payload(marker)
    torch.save(state, target.with_suffix(".tmp"))
    target.with_suffix(".tmp").replace(target)
    # An attacker rewrites the record of sizes and CRC-32s too (else it is refused as damaged).
    record = CheckpointState.from_json((tag / CLIENT_FILE).read_text(), "txl.json")
    record.files = digests(str(tag), list(record.files), sync=False)
    (tag / CLIENT_FILE).write_text(record.to_json())
    return copy, marker


@pytest.fixture(scope="module")
def poisoned(runs, tmp_path_factory) -> dict[int, tuple[Path, Path, Ended]]:
    """stage -> (poisoned copy, its marker, how --resume auto of it ended); the resumes all in
    one process (tests/cli/startups.py)."""
    copies = {stage: poisoned_copy(runs[stage][0], stage, tmp_path_factory.mktemp("poisoned"))
              for stage in STAGES}  # fmt: skip
    resumes = [
        (["--config", copy / "config.json", "--resume", "auto", "--set", f"train.out_dir={copy}",
          "--set", "logging.wandb.mode=disabled"], {})
        for copy, _ in copies.values()
    ]  # fmt: skip
    return {stage: (*copies[stage], ended) for stage, ended in zip(STAGES, start_ups(resumes))}


@pytest.mark.parametrize("stage", STAGES)
def test_poisoned_checkpoint_is_refused_by_export_and_resume(poisoned, stage, tmp_path):
    copy, marker, resumed = poisoned[stage]
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    last = resumed.stderr.strip().splitlines()[-1]
    assert last.startswith("checkpoint error: ") and "posix.system" in last
    with pytest.raises(ExportError, match=r"optim_states.pt|model_states.pt") as err:
        export(str(copy), str(tmp_path / "export"), vocab_path=str(copy.parent / "none"))
    assert "posix.system" in str(err.value)
    assert not marker.exists()
    assert not (tmp_path / "export").exists()
