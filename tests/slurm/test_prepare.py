"""launch/slurm/prepare.sbatch on the 2-node cluster: job arrays of txl-prepare parts and
dependent merges give byte-identical output to one process; a killed part is rerun alone."""

from __future__ import annotations

import json
from pathlib import Path

from data_pipeline import prepare
from data_pipeline.corpora.datasets import DATASETS
from data_pipeline.corpora.sources import split_files
from data_pipeline.prepare.units import Unit, split_units
from data_pipeline.prepare.units import part_units as units_of_part
from tests.conftest import REPO_ROOT
from tests.data_pipeline.prepare.test_parts import tree
from tests.processes import wait_for

SCRIPT = str(REPO_ROOT / "launch" / "slurm" / "prepare.sbatch")
# Small units and one worker: each part has dozens of units and runs for seconds, long enough
# to be killed midway.
LAYOUT = {"unit_bytes": 10_000, "sample_size": 2_500, "shard_size": 10_000}


def prepare_args(source: Path, out: Path) -> list[str]:
    return [
        "--dataset", "wikitext-2", "--source", str(source), "--out", str(out), "--workers", "1",
        *(f"--{key.replace('_', '-')}={value}" for key, value in LAYOUT.items()),
    ]  # fmt: skip


def part_units(source: Path, part: int) -> list[Unit]:
    """The units of part ``part`` of 2 of the source (as txl-prepare cuts them)."""
    wikitext_2 = DATASETS["wikitext-2"]
    files = split_files(wikitext_2, str(source))
    size, documents = LAYOUT["unit_bytes"], wikitext_2.documents
    units = [u for s, f in files.items() for u in split_units(s, f, documents, size, {})]
    return units_of_part(units, part - 1, 2)


def submit(cluster, logs: Path, args: list[str], *sbatch: str) -> str:
    """sbatch prepare.sbatch; returns the job id."""
    out = cluster.run("sbatch", "--parsable", f"--output={logs}/%x-%j.out", *sbatch, SCRIPT, *args)
    return out.strip().split(";")[0]


def finished(cluster, job_id: str, state: str = "COMPLETED") -> dict[str, str]:
    job = cluster.wait_job(job_id, timeout=300)
    assert job["JobState"] == state, job
    return job


def whole_record(path: Path) -> bool:
    """A unit's record as txl-prepare counts it: a kill can cut the JSON being written."""
    try:
        return bool(json.loads(path.read_bytes()))
    except (FileNotFoundError, ValueError):
        return False


def test_array_parts_and_merges_equal_one_process_and_a_killed_part_reruns(
    cluster, shared_data, tmp_path
):
    source = shared_data / "wikitext-2"
    single = tmp_path / "single"
    prepare("wikitext-2", str(single), str(source), progress=False, **LAYOUT)
    out, logs = tmp_path / "cluster", tmp_path / "logs"
    logs.mkdir()
    args = prepare_args(source, out)
    two_nodes = ["--array=1-2", "--cpus-per-task=2"]  # a node has 2 CPUs: one part per node
    cluster.wait_until_idle()  # an earlier test may have cut n2 off

    # Round 1: the parts count words, the merge builds the vocabulary.
    counting = submit(cluster, logs, args, *two_nodes)
    merge = submit(cluster, logs, args, f"--dependency=afterok:{counting}")
    nodes = {finished(cluster, f"{counting}_{i}")["NodeList"] for i in (1, 2)}
    assert nodes == {"n1", "n2"}
    finished(cluster, merge)
    assert (out / "vocab.txt").read_bytes() == (single / "vocab.txt").read_bytes()

    # Round 2: the parts encode; part 2 is killed once it has finished some of its units.
    encoding = submit(cluster, logs, args, *two_nodes)
    records = [
        out / ".prepare" / u.split / f"unit-{u.index:05d}.json" for u in part_units(source, 2)
    ]
    done = lambda: sum(map(whole_record, records))  # noqa: E731
    wait_for("part 2's first units", lambda: done() >= 3, timeout=180, interval=0.05)
    cluster.run("scancel", f"{encoding}_2")
    finished(cluster, f"{encoding}_1")
    finished(cluster, f"{encoding}_2", "CANCELLED")
    done_before = done()
    assert 3 <= done_before < len(records), "part 2 was to be killed midway"
    part1 = {p: p.stat().st_mtime_ns for p in (out / "valid").glob("*.tar")}

    # The killed part alone, then the merge.
    rerun = submit(cluster, logs, args, "--array=2", "--export=ALL,TXL_PARTS=2")
    merge = submit(cluster, logs, args, f"--dependency=afterok:{rerun}")
    finished(cluster, f"{rerun}_2")
    finished(cluster, merge)
    log = (logs / f"txl-prepare-{cluster.job(f'{rerun}_2')['JobId']}.out").read_text()
    assert "--part 2/2" in log and f"({done_before} done before)" in log, log
    assert "Warning" not in log, log  # e.g. runpy's, had the job run a module the package imports
    assert {p: p.stat().st_mtime_ns for p in part1} == part1  # part 1's shards untouched
    assert tree(out) == tree(single)
