"""txl-report's reading of a run's metrics.jsonl (its drawing and summary: test_report.py)."""

from __future__ import annotations

import json

from tests.cli.test_report import write_metrics
from txl_dist.cli.run_metrics import read_metrics


def test_reads_training_and_evaluation_series(tmp_path):
    write_metrics(tmp_path)
    metrics = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert len(metrics.loss.points) == 40
    assert metrics.loss.points[10] == 1.0  # the later record of a step wins
    assert metrics.score == "ppl" and sorted(metrics.scores) == ["test", "valid"]
    assert metrics.scores["valid"].xy()[0] == [20, 40]


def test_each_corpus_of_a_mix_is_a_series_beside_the_split(tmp_path):
    rows = [
        dict(step=4, split="valid", corpus=c, ppl=p) for c, p in (("wiki", 90.0), ("news", 60.0))
    ]
    rows.append(dict(step=4, split="valid", ppl=72.0))
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scores = read_metrics(str(path)).scores
    assert {name: s.points for name, s in scores.items()} == {
        "valid wiki": {4: 90.0}, "valid news": {4: 60.0}, "valid": {4: 72.0},
    }  # fmt: skip
