"""launch/examples.py: its files are created anew (never through a planted link) and its task
files read back the data's path whole, whatever the path holds."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import yaml

from tests.conftest import REPO_ROOT

SPEC = importlib.util.spec_from_file_location("examples", REPO_ROOT / "launch" / "examples.py")
examples = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(examples)


def run(monkeypatch, *argv: str) -> None:
    """The script's command line, as `python launch/examples.py ARGV`."""
    monkeypatch.setattr(sys, "argv", ["examples.py", *argv])
    examples.main()


@pytest.mark.parametrize("folder", ["tasks #1", "a: b", 'it\'s "quoted" ü'])
def test_a_task_file_reads_back_its_data_path_whole(shared_data, tmp_path, monkeypatch, folder):
    out = tmp_path / folder
    run(monkeypatch, "tasks", str(shared_data / "wikitext-103" / "wiki.valid.tokens"), str(out))
    for name in ("wt103_valid", "wt103_last_word"):
        task = yaml.safe_load((out / f"{name}.yaml").read_text())
        assert task["task"] == name
        assert task["dataset_kwargs"]["data_files"]["test"] == f"{out}/{name}.jsonl"
        assert (out / f"{name}.jsonl").read_text().startswith('{"text": ')


def test_files_are_created_anew_not_through_a_planted_link(shared_data, tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "train.jsonl").symlink_to(victim)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "wt103_valid.yaml").symlink_to(victim)
    source = shared_data / "wikitext-103" / "wiki.valid.tokens"
    run(monkeypatch, "corpus", str(source), str(out))
    run(monkeypatch, "tasks", str(source), str(tmp_path / "tasks"))
    assert victim.read_text() == "keep me"
    assert not (out / "train.jsonl").is_symlink()
    articles = [json.loads(line)["text"] for line in (out / "train.jsonl").open()]
    assert len(articles) > 10 and articles[0].startswith(" = ")
    assert not (tmp_path / "tasks" / "wt103_valid.yaml").is_symlink()
