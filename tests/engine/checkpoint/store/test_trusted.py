"""Received checkpoints cannot run code: every pickle is checked before anything unpickles it."""

import os

import pytest
import torch

from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import UnsafeCheckpointError
from txl_dist.engine.checkpoint.parts.memory import rng_state, rows_of


class Payload:
    """Unpickling this runs `touch MARKER`: the attack the checks must stop."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def write_checkpoint(directory, payload=None, **save_kwargs):
    """A one-rank checkpoint as our save() writes it; `payload` goes into the memory file."""
    tag = directory / "global_step3"
    tag.mkdir(parents=True)
    state = {"first_row": 0, "memory": [torch.zeros(2, 3, 4)], "rng": rng_state()}
    if payload is not None:
        state["extra"] = payload
    torch.save(state, tag / "memory_rank0.pt", **save_kwargs)
    state = checkpoint.CheckpointState(
        step=3, world_size=1, global_rows=2, rows_per_rank=2, config={}, vocab_size=10,
        vocab_sha256="0" * 64, parts={"stream": {}},
    )  # fmt: skip
    (tag / checkpoint.CLIENT_FILE).write_text(state.to_json())
    (directory / checkpoint.LATEST).write_text(tag.name)
    return tag


def test_our_own_checkpoint_passes_and_loads(tmp_path):
    write_checkpoint(tmp_path)
    point = checkpoint.find_resume_point(str(tmp_path), "unused")
    rows, rng = rows_of(checkpoint.rank_states(point, "memory"), rows_per_rank=2, rank=0)
    assert rows[0].shape == (2, 3, 4) and rng is not None


@pytest.mark.parametrize("resume", ["dir", "tag", "auto"])
def test_a_pickle_that_runs_code_is_refused_before_unpickling(tmp_path, resume):
    marker = tmp_path / "pwned"
    ckpts = tmp_path / "run" / "checkpoints"
    tag = write_checkpoint(ckpts, Payload(marker))
    arg = {"dir": str(ckpts), "tag": str(tag), "auto": "auto"}[resume]
    with pytest.raises(UnsafeCheckpointError) as err:
        checkpoint.find_resume_point(arg, str(tmp_path / "run"))
    message = str(err.value)
    assert "memory_rank0.pt" in message and "posix.system" in message and "\n" not in message
    assert not marker.exists()


@pytest.mark.parametrize(
    "save_kwargs",
    [{"pickle_protocol": 4}, {"_use_new_zipfile_serialization": False}],
    ids=["protocol4", "legacy-format"],
)
def test_pickles_the_scanner_cannot_read_are_refused(tmp_path, save_kwargs):
    # Protocol 4 names globals with STACK_GLOBAL, which a static scan cannot resolve; the
    # legacy format has no zip to scan. Both would reach a plain unpickler in DeepSpeed.
    marker = tmp_path / "pwned"
    write_checkpoint(tmp_path / "ck", Payload(marker), **save_kwargs)
    with pytest.raises(UnsafeCheckpointError, match="memory_rank0.pt: refused, not a torch.save"):
        checkpoint.find_resume_point(str(tmp_path / "ck"), "unused")
    assert not marker.exists()


@pytest.mark.parametrize("target", ["/", "elsewhere", "tag", "fp32.pt"])
def test_a_link_in_a_checkpoint_is_refused_without_following_it(tmp_path, target):
    # A link to / once made the scan walk the whole file system, /proc included.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    torch.save({"x": Payload(tmp_path / "pwned")}, elsewhere / "fp32.pt")
    tag = write_checkpoint(tmp_path / "ck")
    (tag / "zero").mkdir()  # DeepSpeed's universal checkpoints keep tensors in zero/<param>/
    points_to = {"/": "/", "elsewhere": elsewhere, "tag": tag, "fp32.pt": elsewhere / "fp32.pt"}
    os.symlink(points_to[target], tag / "zero" / "param")
    with pytest.raises(UnsafeCheckpointError) as err:
        checkpoint.find_resume_point(str(tag), "unused")
    assert str(err.value) == (
        f"{tag}/zero/param: refused, a link in a checkpoint, which txl-dist never writes; "
        "replace it with the file itself"
    )


def test_a_fifo_in_a_checkpoint_is_refused_without_opening_it(tmp_path):
    tag = write_checkpoint(tmp_path / "ck")
    os.mkfifo(tag / "optim_states.pt")
    with pytest.raises(UnsafeCheckpointError, match="optim_states.pt: refused, a special file"):
        checkpoint.check_pickles(str(tag))


def test_latest_must_name_a_tag_not_a_path(tmp_path):
    write_checkpoint(tmp_path)
    (tmp_path / checkpoint.LATEST).write_text("../../somewhere/global_step3")
    with pytest.raises(FileNotFoundError, match="not a global_stepN checkpoint tag"):
        checkpoint.find_resume_point(str(tmp_path), "unused")


def test_a_torch_with_known_unpickler_bypasses_is_refused(tmp_path, monkeypatch):
    write_checkpoint(tmp_path)
    monkeypatch.setattr(torch, "__version__", "2.9.1+cpu")
    with pytest.raises(UnsafeCheckpointError, match=r"torch 2.9.1\+cpu .* needs torch>=2.10"):
        checkpoint.find_resume_point(str(tmp_path), "unused")
