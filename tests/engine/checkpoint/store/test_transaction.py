"""Saves by real DeepSpeed engines (ZeRO-2, bf16) on 2 gloo ranks: what a save records, what a
failed save leaves behind, a write failing on one rank only, a full disk, and asynchronous saves
(train.async_save), with their host-memory estimate and synchronous fallback."""

import json
import os
import re
import shutil
import socket

import pytest

from data_pipeline.corpora.subword import TOKENIZER_FILE
from tests import processes
from tests.conftest import REPO_ROOT, small_disk
from tests.engine.checkpoint.store.transaction_worker import (
    NEEDED,
    SETTINGS,
    TOKENIZER,
    WIDTH,
    directories,
    victims,
)
from txl_dist.config.loading import load_run_config
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import CheckpointState
from txl_dist.model.accounting import snapshot_bytes

pytestmark = pytest.mark.slow  # two DeepSpeed ranks

DISK = 20 << 20  # room for one checkpoint, not two


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    """The checkpoints directories the ranks saved into (`disk` is a full tmpfs) and what each
    rank saw."""
    root = tmp_path_factory.mktemp("saves")
    dirs = directories(root)
    script = (
        f"from tests.engine.checkpoint.store.transaction_worker import main; main({str(root)!r})"
    )
    with small_disk(root / "disk", DISK):
        outputs = processes.python_ranks(script, 2, timeout=600, cwd=REPO_ROOT)
        yield dirs, [json.loads(out.split("RESULT ")[1]) for out in outputs]


def test_a_save_records_every_file_and_replaces_a_killed_saves_leftovers(saves):
    dirs, _ = saves
    tag = dirs["plain"] / "global_step2"
    record = CheckpointState.from_json((tag / checkpoint.CLIENT_FILE).read_text(), "txl.json")
    on_disk = {p.name for p in tag.iterdir()} - {checkpoint.CLIENT_FILE}
    assert set(record.files) == on_disk and "stale.pt" not in on_disk
    assert {"memory_rank0.pt", "memory_rank1.pt", "mp_rank_00_model_states.pt"} <= on_disk
    assert (tag / TOKENIZER_FILE).read_text() == TOKENIZER.json_text  # written by rank 0
    for name, recorded in record.files.items():
        assert recorded["bytes"] == (tag / name).stat().st_size > 0
    assert checkpoint.damage(str(tag), record.files) is None
    assert not list(dirs["plain"].glob(f"*{checkpoint.PARTIAL}"))


@pytest.mark.parametrize("name", ["planted", "planted_async"])
def test_a_planted_link_is_removed_never_written_through(saves, name):
    dirs, results = saves
    assert [r[name] for r in results] == [None, None]  # both saves completed
    tag, latest = dirs[name] / "global_step1", dirs[name] / checkpoint.LATEST
    assert tag.is_dir() and not tag.is_symlink() and not latest.is_symlink()
    assert latest.read_text() == "global_step1"
    record = CheckpointState.from_json((tag / checkpoint.CLIENT_FILE).read_text(), "txl.json")
    assert checkpoint.damage(str(tag), record.files) is None
    directory, file = victims(dirs[name])
    assert [p.name for p in directory.iterdir()] == ["precious"]
    assert file.read_text() == "precious"


def test_a_truncated_file_makes_resume_fall_back_to_the_previous_checkpoint(saves, tmp_path):
    dirs, _ = saves
    run = tmp_path / "run"
    shutil.copytree(dirs["plain"], run / "checkpoints")
    newest = run / "checkpoints" / "global_step2"
    shard = next(newest.glob("*optim_states.pt"))
    size = shard.stat().st_size
    os.truncate(shard, size // 2)
    point = checkpoint.find_resume_point("auto", str(run))
    assert point.tag == "global_step1"
    assert point.passed_over == [
        f"checkpoint {newest} is damaged: {shard.name} has {size // 2} bytes, txl.json records "
        f"{size}: resuming from global_step1"
    ]
    with pytest.raises(checkpoint.DamagedCheckpointError, match=f"{shard.name} has {size // 2}"):
        checkpoint.find_resume_point(str(newest), "unused")  # asked for by name: no fallback


def assert_step3_failed_on_rank_1(results, key, directory, latest):
    """Both ranks ended step 3's save with the same one line, naming rank 1 and `latest`."""
    message = results[0][key]
    assert results[1][key] == message
    assert message.startswith(f"saving checkpoint global_step3 in {directory} failed on rank 1")
    assert message.endswith(f"(latest still names {latest})") and "\n" not in message


def test_a_write_failing_on_one_rank_ends_the_save_on_every_rank(saves):
    dirs, results = saves
    assert_step3_failed_on_rank_1(results, "one_rank", dirs["plain"], latest="global_step2")
    assert (dirs["plain"] / checkpoint.LATEST).read_text() == "global_step2"
    assert sorted(p.name for p in dirs["plain"].glob("global_step*")) == [
        "global_step1",
        "global_step2",
    ]


def test_a_full_disk_ends_the_save_naming_the_directory_and_bytes_needed(saves):
    dirs, results = saves
    message = results[0]["full"]
    assert results[1]["full"] == message
    free = re.search(r"bytes, ([\d,]+) are free", message).group(1)
    assert message == (
        f"no space left in {dirs['disk']} for checkpoint global_step2: one checkpoint needs about "
        f"{NEEDED:,} bytes, {free} are free; free space or move train.out_dir, then continue "
        "with --resume auto (latest still names global_step1)"
    )
    assert int(free.replace(",", "")) == shutil.disk_usage(dirs["disk"]).free < NEEDED
    # The previous checkpoint is as it was saved: its record matches, and it loads.
    assert checkpoint.find_resume_point("auto", str(dirs["disk"].parent)).tag == "global_step1"
    assert not list(dirs["disk"].glob(f"*{checkpoint.PARTIAL}"))
    assert results[0]["reloaded"] and results[1]["reloaded"]


def test_the_hook_hears_every_phase_every_rank_passed_and_none_after_a_failure(saves):
    _, results = saves
    whole = ["prepare", "write", "list", "verify", "publish"]
    for result in results:
        steps = [[phase, step] for step in (1, 2) for phase in whole]
        # Step 3 failed in its write on rank 1: no rank passed it.
        assert result["phases"] == [*steps, ["prepare", 3]]


def _record(tag):
    return CheckpointState.from_json((tag / checkpoint.CLIENT_FILE).read_text(), "txl.json")


def test_an_async_save_holds_the_files_a_sync_save_of_the_same_step_holds(saves):
    dirs, results = saves
    synced, background = dirs["plain"] / "global_step1", dirs["async"] / "global_step1"
    assert _record(background).files == _record(synced).files  # every name, size and CRC-32
    assert TOKENIZER_FILE in _record(background).files
    assert checkpoint.damage(str(background), _record(background).files) is None
    assert (dirs["async"] / checkpoint.LATEST).read_text() == "global_step1"
    # The snapshot is taken on the training thread; the rest ran in the background.
    whole = ["prepare", "snapshot", "serialize", "write", "list", "verify", "publish"]
    failed = [["prepare", 3], ["snapshot", 3], ["serialize", 3]]  # step 3's write failed on rank 1
    for result in results:
        assert result["async_phases"] == [*[[phase, 1] for phase in whole], *failed]


def test_a_background_write_failing_on_one_rank_ends_the_save_with_the_one_line(saves):
    dirs, results = saves
    assert_step3_failed_on_rank_1(results, "async_one_rank", dirs["async"], latest="global_step1")
    assert sorted(p.name for p in dirs["async"].glob("global_step*")) == ["global_step1"]


def test_an_async_save_on_a_machine_without_room_saves_synchronously_on_every_rank(saves):
    dirs, results = saves
    synced, fallback = dirs["plain"] / "global_step1", dirs["fallback"] / "global_step1"
    assert _record(fallback).files == _record(synced).files  # complete, the same CRC-32s
    assert checkpoint.damage(str(fallback), _record(fallback).files) is None
    assert (dirs["fallback"] / checkpoint.LATEST).read_text() == "global_step1"
    sync = [[phase, 1] for phase in ("prepare", "write", "list", "verify", "publish")]
    assert results[0]["fallback_phases"] == results[1]["fallback_phases"] == sync  # no snapshot
    [warning] = results[0]["warnings"]  # one line, from rank 0, naming rank 1's machine
    assert warning.startswith(f"{socket.gethostname()} (rank 1) has 0.00 GiB of host memory ")
    assert warning.endswith("saving step 1 synchronously (train.async_save)")
    assert results[1]["warnings"] == []


def test_the_snapshot_estimate_covers_the_files_each_rank_writes(saves):
    dirs, results = saves
    tag = dirs["async"] / "global_step1"
    names = [(f"pp_rank_{rank}_", f"memory_rank{rank}.pt") for rank in (0, 1)]
    written = [[f for f in tag.iterdir() if shard in f.name or f.name == m] for shard, m in names]
    written[0].append(tag / "mp_rank_00_model_states.pt")  # rank 0 writes the model states
    for rank, files in enumerate(written):
        actual = sum(f.stat().st_size for f in files)
        # The estimate adds SNAPSHOT_RECORD_BYTES (1 MiB) for records: 15% of a 7 MB shard
        assert actual <= results[rank]["snapshot_bytes"] <= 1.25 * actual
        # known at start-up: the moments Adam's first step creates counted before it
        assert results[rank]["snapshot_bytes_before_a_step"] == results[rank]["snapshot_bytes"]
        # and training's own growth in host memory (the reservation's room check adds it): this
        # rank's fp32 partition's two moments and step, until the first step takes them
        partition = (WIDTH * WIDTH + WIDTH) // 2
        assert results[rank]["host_growth_before_a_step"] == 2 * 4 * partition + 4
        assert results[rank]["host_growth"] == 0


def test_the_snapshots_memory_is_reserved_once_a_step_ran_and_rank_0_says_so(saves):
    _, results = saves
    [line] = results[0]["reservations"]  # at the second update, beside the first's peak
    reserved = r"asynchronous saves: \d+\.\d\d GiB of host memory reserved on rank 0"
    assert re.fullmatch(reserved, line)
    assert results[1]["reservations"] == []


def test_txl_inspects_estimate_is_the_engines_for_zero_2(saves):
    _, results = saves
    config = load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), SETTINGS)
    # The worker's engine: ZeRO-2, bf16, 2 ranks, one row each.
    estimate = snapshot_bytes(config.model, WIDTH * WIDTH + WIDTH, 2, 2, 2, low_precision=True)
    for rank, expected in enumerate(estimate):
        assert results[rank]["snapshot_bytes"] == pytest.approx(expected, rel=1e-3)
