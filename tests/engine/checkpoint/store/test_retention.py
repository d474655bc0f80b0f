"""Pruning to train.keep_last: this run's newest, never another run's, and no leftovers."""

from tests.engine.checkpoint.on_disk import fake_checkpoint
from txl_dist.engine import checkpoint


def test_prune_keeps_the_last_k_of_this_run_and_removes_partial_leftovers(tmp_path):
    for step in (1, 2):  # a run this one was resumed from: its checkpoints are not ours
        fake_checkpoint(tmp_path, step, 1, 2, run_id="other")
    for step in (10, 20, 30):
        fake_checkpoint(tmp_path, step, 1, 2)
    fake_checkpoint(tmp_path, 25, 1, 2, complete=False)  # a crashed save (before .partial)
    # Conversions go with their checkpoint; unfinished writes up to the latest step go too.
    left = ["global_step10_universal", "global_step20_universal", "global_step15.partial"]
    left += ["global_step20_universal.partial", "global_step40.partial"]
    for name in left:
        (tmp_path / name).mkdir()
    (tmp_path / checkpoint.LATEST).write_text("global_step30")
    checkpoint.prune(str(tmp_path), keep_last=2, run_id="r1")
    assert sorted(p.name for p in tmp_path.glob("global_step*")) == [
        "global_step1",
        "global_step2",
        "global_step20",
        "global_step20_universal",
        "global_step30",
        "global_step40.partial",  # a save after latest's: the next save of step 40 removes it
    ]
