import json
import os

from txl_dist.engine.metrics import Metrics, train_line, wandb_prefix


def test_log_lines_show_bpc_for_char_level_records_and_ppl_for_word_level_ones():
    timing = dict(
        step=7, lr=1e-3, tokens_per_s=100.0, tokens_seen=4096, step_time_s=0.5, data_wait_s=0.0
    )
    char = dict(loss=0.7, bpc=1.0099, memory_gib=1.0, **timing)
    word = dict(loss=3.0, ppl=20.0855, memory_gib=1.0, **timing)
    assert "| bpc    1.0099 |" in train_line(char) and "ppl" not in train_line(char)
    assert "| ppl     20.09 |" in train_line(word) and "bpc" not in train_line(word)
    assert "| seen/rank 4,096 |" in train_line(word)  # rank 0's count, every rank's alike
    mixed = dict(word, mix_tokens={"man": 14_336, "wiki": 6_144})  # drawn by all ranks
    assert train_line(mixed).endswith("| mix, all ranks: man 14,336 (70.0%) wiki 6,144 (30.0%)")


def test_wandb_groups_training_evaluation_and_event_records():
    assert wandb_prefix(dict(step=3, loss=1.0)) == "train/"
    assert wandb_prefix(dict(step=3, split="valid", corpus="wiki")) == "valid/wiki/"
    assert wandb_prefix(dict(step=3, event="straggler", rank=1)) == "straggler/"


def test_metrics_are_never_appended_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.symlink(victim, tmp_path / "metrics.jsonl")
    metrics = Metrics(str(tmp_path), enabled=True, run={"run_id": "r", "restart": 0})
    metrics.log({"step": 1, "loss": 2.0})
    assert victim.read_text() == "precious\n"
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["loss"] for row in rows] == [2.0]
