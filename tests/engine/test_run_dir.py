"""One run per output directory: refusal, --overwrite moving the old run aside, nothing lost."""

import pytest

from tests.engine.checkpoint.on_disk import fake_checkpoint
from txl_dist.engine import run_dir
from txl_dist.engine.run_dir import RunDirError


def test_an_empty_or_new_directory_is_free(tmp_path):
    run_dir.claim(str(tmp_path / "new"), overwrite=False, is_main=True)
    (tmp_path / "logs_only").mkdir()
    (tmp_path / "logs_only" / "metrics.jsonl").write_text("{}\n")
    run_dir.claim(str(tmp_path / "logs_only"), overwrite=False, is_main=True)
    assert not (tmp_path / "new").exists()


def test_a_directory_with_checkpoints_is_refused_in_one_line(tmp_path):
    out = tmp_path / "run"
    fake_checkpoint(out / "checkpoints", 20, 1, 2)
    with pytest.raises(RunDirError) as err:
        run_dir.claim(str(out), overwrite=False, is_main=True)
    message = str(err.value)
    assert "\n" not in message
    assert f"{out} holds run r1 (latest checkpoint global_step20)" in message
    assert "--resume auto" in message and "--overwrite" in message
    assert (out / "checkpoints" / "latest").read_text() == "global_step20"


def test_a_crash_before_the_first_complete_save_still_marks_the_directory(tmp_path):
    out = tmp_path / "run"
    fake_checkpoint(out / "checkpoints", 5, 1, 2, complete=False)
    with pytest.raises(RunDirError, match="checkpoints up to global_step5"):
        run_dir.claim(str(out), overwrite=False, is_main=True)


def test_overwrite_moves_the_old_run_aside_whole(tmp_path):
    out = tmp_path / "run"
    fake_checkpoint(out / "checkpoints", 20, 1, 2)
    (out / "metrics.jsonl").write_text('{"step": 20}\n')
    run_dir.claim(str(out), overwrite=True, is_main=False)  # only the main rank moves it
    assert (out / "checkpoints" / "latest").exists()
    run_dir.claim(str(out), overwrite=True, is_main=True)
    assert not out.exists()
    (aside,) = tmp_path.glob("run.old-*")
    assert (aside / "checkpoints" / "latest").read_text() == "global_step20"
    assert (aside / "metrics.jsonl").read_text() == '{"step": 20}\n'
