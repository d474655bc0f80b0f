"""txl-eval --tasks: the harness's own evaluator on locally defined tasks scores what txl-eval
and our model score: rolling perplexity as `txl-eval --text`, a cloze task's continuations as
our per-token losses after their contexts; the results JSON never goes through a planted link."""

from __future__ import annotations

import json
import math
import re

import pytest
from lm_eval.utils import sanitize_model_name

from tests.harness.conftest import (
    ROLLING,
    last_word_docs,
    reference_loglikelihood,
    rolling_docs,
    write_task,
)
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.evaluate import main


def txl_eval(capsys, *args) -> str:
    assert main([str(a) for a in args]) == 0
    return capsys.readouterr().out


def test_rolling_perplexity_is_txl_evals_and_the_cloze_task_our_losses(
    capsys, offline_harness, model_dir, tasks, wiki_lines, tmp_path
):
    out = tmp_path / "results"
    printed = txl_eval(
        capsys, "--model", model_dir, "--tasks", "wt103_rolling,wt103_last_word",
        "--include-path", tasks, "--output-path", out, "--batch-size", "4", "--device", "cpu",
    )  # fmt: skip
    (path,) = out.glob("*/results_*.json")
    assert f"results: {path}" in printed
    results = json.loads(path.read_text())["results"]
    rolling = results["wt103_rolling"]["word_perplexity,none"]
    assert re.search(rf"^\|\s*\|.*\|word_perplexity\|.*\|{rolling:.4f}\|", printed, re.M)

    # txl-eval on each document as a file after one blank line: the same tokens (<eos>, then
    # each line's words and <eos>), every one scored once, one row, the same lengths.
    docs, nll, tokens, words = rolling_docs(wiki_lines), 0.0, 0, 0
    for i, doc in enumerate(docs):
        (tmp_path / f"{i}.txt").write_text("\n" + doc)
        plain = ["--model", model_dir, "--text", tmp_path / f"{i}.txt", "--batch-size", "1"]
        report = json.loads(txl_eval(capsys, *plain, "--json", "--no-progress"))
        nll, tokens = nll + report["loss"] * report["tokens"], tokens + report["tokens"]
        words += len(re.split(r"\s+", doc))  # the harness's word count
    harness_nll = math.log(rolling) * words
    assert harness_nll / nll == pytest.approx(1, rel=1e-4)
    assert report["settings"]["unknown_words"] > 0  # the same unknown words, read alike

    from txl_dist.harness import TXLM

    model = TXLM(str(model_dir), device="cpu")
    lls = [
        reference_loglikelihood(model.model, model_dir, " ".join(t.split()[:-1]), t.split()[-1])
        for t in last_word_docs(wiki_lines)
    ]
    cloze = results["wt103_last_word"]
    assert cloze["perplexity,none"] == pytest.approx(math.exp(-sum(lls) / len(lls)), rel=1e-5)


def test_harness_flags_need_tasks_and_a_task_without_data_is_one_line(
    capsys, offline_harness, model_dir, tmp_path
):
    with pytest.raises(SystemExit):
        main(["--model", str(model_dir), "--text", "x.txt", "--limit", "3"])
    assert "go with --tasks" in capsys.readouterr().err
    write_task(tmp_path, "no_data", [], ROLLING)
    (tmp_path / "no_data.jsonl").unlink()
    argv = ["--model", model_dir, "--tasks", "no_data", "--include-path", tmp_path]
    assert main([str(a) for a in argv]) == USAGE_ERROR
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("txl-eval: error: ") and "no_data.jsonl" in error


@pytest.mark.parametrize("planted", ["a directory", "a file"])
def test_results_are_never_written_through_a_planted_link(
    capsys, offline_harness, model_dir, tasks, tmp_path, planted
):
    out = tmp_path / "results"
    out.mkdir()
    victim = tmp_path / "victim"
    if planted == "a directory":
        victim.mkdir()
    else:
        victim.write_text("precious")
    (out / sanitize_model_name(str(model_dir))).symlink_to(victim)
    argv = ["--model", model_dir, "--tasks", "wt103_rolling", "--include-path", tasks]
    printed = txl_eval(capsys, *argv, "--output-path", out, "--limit", "1", "--device", "cpu")
    (path,) = out.glob("*/results_*.json")
    assert f"results: {path}" in printed
    assert not path.parent.is_symlink() and not path.is_symlink()
    assert (list(victim.iterdir()) == []) if victim.is_dir() else victim.read_text() == "precious"
