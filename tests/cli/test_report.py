"""txl-report: metrics.jsonl (as the engine writes it) -> a 4-panel PNG; sweep CSVs -> a plot."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest

from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.report import main, plot, plot_sweep, sweep_curves
from txl_dist.cli.run_metrics import read_metrics
from txl_dist.evaluation.context import CSV_FIELDS, SweepRow, read_csv, write_csv
from txl_dist.evaluation.scores import score

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


def test_writes_a_png_of_the_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path)
    assert main([str(tmp_path)]) == 0
    png = (tmp_path / "report.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000  # four drawn panels, not a blank
    assert main([str(tmp_path), "--out", str(tmp_path / "other.png")]) == 0
    assert (tmp_path / "other.png").read_bytes().startswith(PNG_MAGIC)


def test_a_report_png_planted_as_a_link_is_replaced_not_written_through(tmp_path):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "report.png")
    assert main([str(tmp_path)]) == 0
    assert victim.read_text() == "precious"
    assert (tmp_path / "report.png").read_bytes().startswith(PNG_MAGIC)


def test_a_char_level_run_plots_bits_per_character(tmp_path):
    # The engine's rows for char-level data carry bpc where word-level ones carry ppl.
    pytest.importorskip("matplotlib")
    rows = [dict(step=s, loss=2.0 - s / 10, bpc=(2.0 - s / 10) / math.log(2), lr=1.0,
                 tokens_per_s=10.0) for s in (1, 2, 3)]  # fmt: skip
    rows += [dict(step=s, split="valid", loss=1.5, bpc=1.5 / math.log(2)) for s in (2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert metrics.score == "bpc"
    drawn = plot(metrics, str(tmp_path / "r.png"), "char")
    assert drawn["evaluation bits per character"]["valid"] == ([2, 3], [1.5 / math.log(2)] * 2)
    assert "evaluation perplexity" not in drawn


def test_a_directory_without_metrics_is_a_clear_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == USAGE_ERROR
    assert "metrics.jsonl not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "row, named",
    [
        ('{"step": 41, "loss": "9.1"}', "line 41: loss '9.1' is not a number"),
        ('{"step": 41, "lr": [0.1]}', "line 41: lr [0.1] is not a number"),
        ('{"step": 41, "split": "valid", "ppl": "inf"}', "line 41: ppl 'inf' is not a number"),
        ('{"step": "41", "loss": 1.0}', "line 41: step '41' is not a number"),
        ('{"step": 41, "split": 3, "ppl": 1.0}', "line 41: split 3 is not a text"),
        ('{"step": 41, "run_id": {"a": 1}}', "line 41: run_id {'a': 1} is not a text"),
        ('{"loss": 1.0}', "line 41 is not a metrics record"),
        ("[41, 1.0]", "line 41 is not a metrics record"),
        ('{"step": 41, "loss": 1.', "line 41 is not a metrics record"),
    ],
)
def test_a_malformed_metrics_row_is_one_line_naming_it(tmp_path, capsys, row, named):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path, steps=39)  # 39 steps, 1 valid, 1 test and 1 resumed row: 42 lines
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines.insert(40, row + "\n")
    (tmp_path / "metrics.jsonl").write_text("".join(lines))
    assert main([str(tmp_path)]) == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"txl-report: error: {tmp_path / 'metrics.jsonl'} {named}"), err
    assert err.endswith(": fix or remove that line\n") and err.count("\n") == 1, err
    assert not (tmp_path / "report.png").exists()


@pytest.mark.parametrize("planted", ["a link to /dev/zero", "a line past the cap"])
def test_a_received_metrics_log_is_read_capped_and_never_through_a_link(
    tmp_path, capsys, monkeypatch, planted
):
    path = tmp_path / "metrics.jsonl"
    if planted == "a link to /dev/zero":
        path.symlink_to("/dev/zero")
        named = "is a link"
    else:
        monkeypatch.setenv("TXL_MAX_METADATA_BYTES", "1000")
        path.write_text(json.dumps(dict(step=1, loss=1.0, note="x" * 2000)) + "\n")
        named = "holds a line of more than TXL_MAX_METADATA_BYTES=1000 bytes"
    assert main([str(tmp_path)]) == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"txl-report: error: {path} {named}") and err.count("\n") == 1, err


def test_draws_only_the_latest_run_or_the_one_asked_for_with_its_restarts(tmp_path, capsys):
    # Run "a" trained 10 steps; run "b" started later in the same directory (--overwrite moves
    # the old run aside, but older files may mix runs), restarted once at step 4.
    rows = [dict(step=s, loss=9.0, lr=1.0, run_id="a", restart=0) for s in range(1, 11)]
    rows += [dict(step=s, loss=5.0, lr=2.0, run_id="b", restart=0) for s in range(1, 6)]
    rows += [dict(step=s, loss=4.0, lr=2.0, run_id="b", restart=1) for s in range(4, 8)]
    rows.append(dict(step=7, split="valid", ppl=50.0, run_id="b", restart=1))
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    latest = read_metrics(str(path))
    assert latest.run_id == "b" and latest.loss.xy()[0] == list(range(1, 8))
    assert latest.loss.points[4] == 4.0 and latest.restarts == [4]
    older = read_metrics(str(path), "a")
    assert older.loss.xy() == (list(range(1, 11)), [9.0] * 10) and older.restarts == []
    assert main([str(tmp_path), "--run", "c"]) == USAGE_ERROR
    assert "holds no run c (runs: a, b)" in capsys.readouterr().err


def test_stragglers_are_marked_on_tokens_per_s_and_printed(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path)
    named = dict(event="straggler", step=30, rank=1, host="gpu-07", section="forward_backward",
                 seconds=0.75, median_s=0.5, relative=0.66, individual=0.98)  # fmt: skip
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps(named) + "\n")
    metrics = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert metrics.stragglers == [named]
    drawn = plot(metrics, str(tmp_path / "report.png"), "run")
    assert drawn["tokens/s"]["straggler rank 1"] == ([30, 30], [0, 1])
    assert "straggler rank 1" not in drawn["training loss"]
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == (
        "straggler at step 30: rank 1 (host gpu-07) forward_backward 1.50x the ranks' median"
    )


def test_transient_faults_are_marked_on_every_panel_and_said(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path)
    fault = dict(step=5, event="transient_fault", ranks=[1])
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps(fault) + "\n")
    metrics = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert metrics.faults == [fault] and metrics.loss.points[5] == 10 - 5 * 5 / 40
    drawn = plot(metrics, str(tmp_path / "report.png"), "run")
    assert all(panel["fault rank 1"] == ([5, 5], [0, 1]) for panel in drawn.values())
    assert main([str(tmp_path)]) == 0
    assert (
        "transient fault at step 5 on rank 1: the step trained again, its second attempt kept"
    ) in capsys.readouterr().out.splitlines()


# ---- sweeps ----


def write_sweep(
    path, models: dict[str, list[float]], swept: str = "mem_len", level: str = "word"
) -> None:
    """A sweep CSV as txl-eval writes it: each model's losses at attention lengths 64, 96, 128
    (perplexity for word-level data, bits per character for char-level)."""
    rows = [
        SweepRow(
            model=model,
            swept=swept,
            context=64 + 32 * k,
            tgt_len=64,
            mem_len=32 * k,
            clamp_len=-1,
            same_length=False,
            attn_len=64 + 32 * k,
            loss=loss,
            **{"ppl": None, "bpc": None, **score(loss, level)},
            tokens=1000,
        )  # fmt: skip
        for model, losses in models.items()
        for k, loss in enumerate(losses)
    ]
    write_csv(rows, str(path))


def test_a_sweep_plot_has_one_line_per_model(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    write_sweep(tmp_path / "a.csv", {"small": [5.0, 4.8, 4.79], "big": [4.5, 4.2, 4.0]})
    write_sweep(tmp_path / "b.csv", {"other": [6.0, 6.0, 6.0]})
    paths = [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    drawn = plot_sweep(sweep_curves(paths), str(tmp_path / "plot.png"), 0.01)
    assert sorted(drawn) == ["big", "other", "small"]
    x, y = drawn["big"]
    assert x == [64, 96, 128] and y == pytest.approx([math.exp(v) for v in (4.5, 4.2, 4.0)])

    assert main(["--sweep", *paths]) == 0
    png = (tmp_path / "a.png").read_bytes()  # beside the first CSV
    assert png.startswith(PNG_MAGIC)
    assert matplotlib.image.imread(str(tmp_path / "a.png")).shape[:2] == (450, 700)


def test_a_segment_alone_row_is_marked_on_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    write_sweep(tmp_path / "same.csv", {"tiny": [5.2, 4.9, 4.8]})
    rows = read_csv(str(tmp_path / "same.csv"))
    rows[0] = dataclasses.replace(rows[0], context=0, mem_len=0, segment_alone=True)
    write_csv(rows, str(tmp_path / "same.csv"))
    curves = sweep_curves([str(tmp_path / "same.csv")])
    assert [r.segment_alone for r in curves["tiny"]] == [True, False, False]
    drawn = plot_sweep(curves, str(tmp_path / "plot.svg"), 0.01)
    assert drawn["tiny"][0] == [0, 96, 128]
    svg = (tmp_path / "plot.svg").read_text()  # matplotlib keeps each text as a comment
    assert "mem_len 0*" in svg and "* the segment alone" in svg


def test_a_char_level_sweep_plots_bits_per_character(tmp_path):
    pytest.importorskip("matplotlib")
    write_sweep(tmp_path / "chars.csv", {"enwik8": [0.8, 0.75, 0.74]}, level="char")
    drawn = plot_sweep(sweep_curves([str(tmp_path / "chars.csv")]), str(tmp_path / "p.png"), 0.01)
    assert drawn["enwik8"][1] == pytest.approx([v / math.log(2) for v in (0.8, 0.75, 0.74)])
    write_sweep(tmp_path / "words.csv", {"wt103": [5.0, 4.9, 4.8]})
    with pytest.raises(ValueError, match="mix perplexity and bits per character"):
        sweep_curves([str(tmp_path / "chars.csv"), str(tmp_path / "words.csv")])


def test_a_sweep_csv_written_before_bpc_reads_as_perplexity(tmp_path):
    write_sweep(tmp_path / "new.csv", {"wt103": [5.0, 4.9, 4.8]})
    lines = (tmp_path / "new.csv").read_text().splitlines()
    bpc = CSV_FIELDS.index("bpc")
    old = [",".join(c for i, c in enumerate(line.split(",")) if i != bpc) for line in lines]
    (tmp_path / "old.csv").write_text("\n".join(old) + "\n")
    assert "bpc" not in old[0]
    assert read_csv(str(tmp_path / "old.csv")) == read_csv(str(tmp_path / "new.csv"))


def test_bad_sweep_files_are_clear_errors(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    (tmp_path / "x.csv").write_text("step,loss\n1,2.0\n")
    assert main(["--sweep", str(tmp_path / "x.csv")]) == USAGE_ERROR
    assert "not a txl-eval sweep CSV" in capsys.readouterr().err
    write_sweep(tmp_path / "mem.csv", {"a": [5.0, 4.9, 4.8]})
    write_sweep(tmp_path / "clamp.csv", {"b": [5.0, 4.9, 4.8]}, swept="clamp_len")
    assert main(["--sweep", str(tmp_path / "mem.csv"), str(tmp_path / "clamp.csv")]) == USAGE_ERROR
    assert "one kind at a time" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--sweep", str(tmp_path / "mem.csv")])


def test_rollbacks_are_marked_and_said_and_their_records_draw_no_loss(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    write_metrics(tmp_path)
    rollback = dict(
        step=25, event="rollback", spike_step=23, spike_loss=11.2, spike_median=6.1,
        spike_deviation=0.2, restored_step=20, skipped_first=21, skipped_last=30,
    )  # fmt: skip
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps(rollback) + "\n")
    metrics = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert metrics.rollbacks == [rollback] and metrics.loss.points[25] == 10 - 5 * 25 / 40
    assert main([str(tmp_path)]) == 0
    assert (
        "rollback: loss spike at step 23 (loss 11.2000, median 6.1000), restored step 20, "
        "skipped data positions 21-30"
    ) in capsys.readouterr().out
