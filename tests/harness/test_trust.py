"""Harness task files are code: from elsewhere, a `!function` is refused and templates render in
Jinja's sandbox unless --trust-task-code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.conftest import ROLLING, write_task
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.evaluate import main

DOCS = [{"text": "the cat sat on the mat\n"}, {"text": "a dog sat on a log\n"}]
# utils.py beside a task file: importing it, or calling what it holds, leaves a marker.
UTILS = """\
from pathlib import Path
Path(__file__).with_name("imported").touch()

def process_docs(dataset):
    Path(__file__).with_name("called").touch()
    return dataset

def doc_to_text(doc):
    Path(__file__).with_name("called").touch()
    return ""

def metric(items):
    Path(__file__).with_name("called").touch()
    return 0.0
"""
FUNCTIONS = {
    "process_docs": "process_docs: !function utils.process_docs\n" + ROLLING,
    "doc_to_text": ROLLING.replace('doc_to_text: ""', "doc_to_text: !function utils.doc_to_text"),
    "an aggregation": ROLLING + "  - metric: mine\n    aggregation: !function utils.metric\n",
}
# Templates that reach a shell outside the sandbox: each would touch MARKER.
TEMPLATES = {
    "cycler": "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "joiner": "{{ joiner.__init__.__globals__.os.system('touch MARKER') }}",
    "lipsum": "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
    "a class's subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
}


def txl_eval(model_dir: Path, tasks: Path, name: str, *flags: str) -> int:
    argv = ["--model", str(model_dir), "--tasks", name, "--include-path", str(tasks)]
    return main([*argv, "--limit", "1", "--device", "cpu", *flags])


def one_line(capsys) -> str:
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("txl-eval: error: "), error
    return error


@pytest.mark.parametrize("where", FUNCTIONS)
def test_a_function_of_a_task_file_runs_only_when_trusted(
    capsys, offline_harness, model_dir, tmp_path, where
):
    write_task(tmp_path, "coded", DOCS, FUNCTIONS[where])
    (tmp_path / "utils.py").write_text(UTILS)
    assert txl_eval(model_dir, tmp_path, "coded") == USAGE_ERROR
    error = one_line(capsys)
    assert "asks for `!function utils." in error and "--trust-task-code runs it" in error
    assert not (tmp_path / "imported").exists() and not (tmp_path / "called").exists()
    if where == "process_docs":  # the way out it names
        assert txl_eval(model_dir, tmp_path, "coded", "--trust-task-code") == 0
        assert (tmp_path / "called").exists()


@pytest.mark.parametrize("payload", TEMPLATES)
def test_a_template_reaching_for_code_is_refused_unless_trusted(
    capsys, offline_harness, model_dir, tmp_path, monkeypatch, payload
):
    monkeypatch.chdir(tmp_path)
    template = ROLLING.replace('doc_to_text: ""', f'doc_to_text: "{TEMPLATES[payload]}"')
    write_task(tmp_path, "templated", DOCS, template)
    assert txl_eval(model_dir, tmp_path, "templated") == USAGE_ERROR
    assert "--trust-task-code renders it" in one_line(capsys)
    assert not (tmp_path / "MARKER").exists()
    if payload == "cycler":  # trusted, it runs as the harness alone would run it
        txl_eval(model_dir, tmp_path, "templated", "--trust-task-code")
        assert (tmp_path / "MARKER").exists()


# Templates building past the sandbox's bound (20 million characters, each in one operation but
# the last): without it, with a larger count, each would allocate until memory ran out.
LARGE = {
    "a repetition": "{{ 'ab' * 10000000 }}",
    "a padding filter": "{{ 'a'|center(20000000) }}",
    "a padding method": "{{ 'a'.zfill(20000000) }}",
    "a printf width": "{{ '%20000000s' % 'a' }}",
    "a format width": "{{ '{:{}}'.format('a', 20000000) }}",
    "an output": "{% for i in range(5000) %}{{ 'x' * 4000 }}{% endfor %}",
}


@pytest.mark.parametrize("payload", LARGE)
def test_a_template_building_past_the_bound_is_refused(
    capsys, offline_harness, model_dir, tmp_path, payload
):
    template = ROLLING.replace('doc_to_text: ""', f'doc_to_text: "{LARGE[payload]}"')
    write_task(tmp_path, "large", DOCS, template)
    assert txl_eval(model_dir, tmp_path, "large") == USAGE_ERROR
    error = one_line(capsys)
    assert "is past the 16,777,216 a template may build" in error, error
    assert "--trust-task-code renders it" in error


# Metrics only evaluate.load gives: a script by path, `name/name.py` under the working directory.
METRICS = {
    "an absolute path": ("{dir}/scripts/evil.py", ""),
    "a path from the working directory": ("scripts/evil.py", ""),
    "hf_evaluate on a registered name": ("exact_match", "    hf_evaluate: true\n"),
}


@pytest.mark.parametrize("route", METRICS)
def test_a_metric_only_evaluate_gives_is_refused_unless_trusted(
    capsys, offline_harness, model_dir, tmp_path, monkeypatch, route
):
    monkeypatch.chdir(tmp_path)
    name, extra = METRICS[route]
    name = name.format(dir=tmp_path)
    script = tmp_path / (name if name.endswith(".py") else f"{name}/{name}.py")
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"from pathlib import Path\nPath({str(tmp_path / 'MARKER')!r}).touch()\n")
    metric = f"  - metric: {name}\n    aggregation: mean\n    higher_is_better: true\n{extra}"
    write_task(tmp_path, "measured", DOCS, ROLLING + metric)
    assert txl_eval(model_dir, tmp_path, "measured") == USAGE_ERROR
    error = one_line(capsys)
    assert f"task 'measured' ({tmp_path / 'measured.yaml'}) asks for metric '{name}'" in error
    assert "--trust-task-code loads it" in error
    assert not (tmp_path / "MARKER").exists()
    if route == "an absolute path":  # trusted, evaluate.load runs it as the harness alone would
        txl_eval(model_dir, tmp_path, "measured", "--trust-task-code")
        assert (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("trusted", [False, True])
@pytest.mark.parametrize("points_at", ["the folder", "the script"])
def test_a_task_pointing_at_a_dataset_script_is_one_line(
    capsys, offline_harness, model_dir, tmp_path, trusted, points_at
):
    (tmp_path / "news").mkdir()
    script = tmp_path / "news" / "news.py"
    script.write_text(f"from pathlib import Path\nPath({str(tmp_path / 'MARKER')!r}).touch()\n")
    path = script if points_at == "the script" else script.parent
    task = f"task: scripted\ndataset_path: {path}\ntest_split: test\n{ROLLING}"
    (tmp_path / "scripted.yaml").write_text(task)
    flags = ["--trust-task-code"] if trusted else []
    assert txl_eval(model_dir, tmp_path, "scripted", *flags) == USAGE_ERROR
    error = one_line(capsys)
    assert f"task 'scripted' ({tmp_path / 'scripted.yaml'}): its dataset_path '{path}'" in error
    assert "is a dataset script ('news.py'), which the datasets library no longer runs" in error
    assert not (tmp_path / "MARKER").exists()
