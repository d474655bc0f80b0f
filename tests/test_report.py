"""txl-report: metrics.jsonl (as the engine writes it) -> a 4-panel PNG."""

from __future__ import annotations

import json
import math

import pytest

from txl_dist.report import main, read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_metrics(run_dir, steps: int = 40) -> None:
    rows = []
    for step in range(1, steps + 1):
        loss = 10 - 5 * step / steps
        rows.append(
            dict(step=step, loss=loss, ppl=math.exp(loss), lr=1e-3 * min(1, step / 10),
                 grad_norm=0.3, tokens_per_s=3000 + step, step_time_s=0.2, time=step)
        )  # fmt: skip
        if step % 20 == 0:
            rows.append(dict(step=step, split="valid", loss=loss, ppl=math.exp(loss), tokens=99))
    rows.append(dict(step=steps, split="test", loss=5.1, ppl=math.exp(5.1), tokens=99))
    rows.append(
        dict(step=10, loss=1.0, lr=1e-4, tokens_per_s=1.0)
    )  # a resumed run logs step 10 again
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_reads_training_and_evaluation_series(tmp_path):
    write_metrics(tmp_path)
    metrics = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert len(metrics.loss.points) == 40
    assert metrics.loss.points[10] == 1.0  # the later record of a step wins
    assert sorted(metrics.ppl) == ["test", "valid"]
    assert metrics.ppl["valid"].xy()[0] == [20, 40]


def test_writes_a_png_of_the_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path)
    assert main([str(tmp_path)]) == 0
    png = (tmp_path / "report.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000  # four drawn panels, not a blank
    assert main([str(tmp_path), "--out", str(tmp_path / "other.png")]) == 0
    assert (tmp_path / "other.png").read_bytes().startswith(PNG_MAGIC)


def test_a_directory_without_metrics_is_a_clear_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 1
    assert "metrics.jsonl not found" in capsys.readouterr().err
