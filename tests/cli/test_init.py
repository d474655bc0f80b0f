"""The commands' shared exit rules (txl_dist/cli/__init__.py): Ctrl-C is one line and 130."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys

import pytest

from tests import processes
from tests.cli.test_generate import VOCAB, small_model
from tests.conftest import REPO_ROOT
from txl_dist.cli import INTERRUPTED

PROGS = {
    "evaluate": "txl-eval", "export": "txl-export", "generate": "txl-generate",
    "inspect_model": "txl-inspect", "report": "txl-report",
}  # fmt: skip


def test_ctrl_c_during_generation_prints_one_line_and_exits_130(tmp_path):
    small_model().save_pretrained(tmp_path)
    VOCAB.save(str(tmp_path / "vocab.txt"))
    args = [sys.executable, "-m", "txl_dist.cli.generate", "--model", tmp_path]
    args += ["--max-tokens", "100000000"]
    # One compute thread, as given: on a busy machine the command would otherwise say that it
    # chose fewer threads, a line before the one this test reads.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    popen = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT, env=env)
    # As in a terminal: a suite started in the background (`... &` in a script) inherits SIGINT
    # ignored, and the command would then generate on until this test's timeout.
    popen["preexec_fn"] = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    with processes.process_group([str(a) for a in args], **popen) as proc:
        assert proc.stdout.read(8)  # generating: words are printed as they come
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == INTERRUPTED
    assert stderr.decode() == "txl-generate: interrupted\n"


@pytest.mark.parametrize("command", PROGS)
def test_every_command_answers_ctrl_c_alike(command, monkeypatch, capsys):
    """Ctrl-C pressed while each command reads its arguments (the first thing each does)."""

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", pressed)
    main = importlib.import_module(f"txl_dist.cli.{command}").main
    assert main([]) == INTERRUPTED
    assert capsys.readouterr().err == f"{PROGS[command]}: interrupted\n"
