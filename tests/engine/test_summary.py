"""The closing lines of a run: its scores, its checkpoint and the next commands."""

from txl_dist.engine.summary import closing_summary

CHECKPOINT = "runs/tiny/checkpoints/global_step200"
EVALUATIONS = {
    "valid": {"step": 200, "split": "valid", "loss": 5.0, "ppl": 148.4131},
    "test": {"step": 200, "split": "test", "loss": 5.1, "ppl": 164.0219},
}


def test_a_finished_run_names_its_scores_checkpoint_and_export():
    lines = closing_summary(
        step=200, max_steps=200, stopped_early=None, evaluations=EVALUATIONS,
        checkpoint=CHECKPOINT,
    )  # fmt: skip
    assert lines == [
        "finished: 200 steps",
        "  valid ppl 148.41  loss 5.0000  (step 200)",
        "  test  ppl 164.02  loss 5.1000  (step 200)",
        f"  checkpoint {CHECKPOINT}",
        "next:",
        f"  export:    txl-export {CHECKPOINT} runs/tiny-export",
        "  train on:  raise train.max_steps, then the same command with --resume auto",
    ]


def test_an_early_stop_says_how_to_continue_and_shows_the_latest_scores():
    char_level = {"valid": {"step": 100, "split": "valid", "loss": 0.7, "bpc": 1.0099}}
    lines = closing_summary(
        step=150, max_steps=200, stopped_early="SIGINT received", evaluations=char_level,
        checkpoint="out/checkpoints/global_step150",
    )  # fmt: skip
    assert lines[0] == "stopped at step 150 of 200 (SIGINT received), checkpointed"
    assert lines[1] == "  valid bpc 1.0099  loss 0.7000  (step 100)"
    assert lines[-1] == "  continue:  the same command with --resume auto"
