"""txl-prepare's command line against Settings: every option of a run is a field, by name; and
Ctrl-C, answered in one line."""

from __future__ import annotations

import filecmp
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields

import pytest

from data_pipeline.cli import INTERRUPTED_LINE, parser, settings_of
from data_pipeline.prepare.settings import Settings
from tests import processes
from tests.conftest import REPO_ROOT

# Settings the command line sets in its own way (--out-option, --source-option, --no-progress)
# or not at all (piece_bytes: tests make small pieces).
NOT_OPTIONS = {"out_options", "source_options", "progress", "piece_bytes"}


def test_every_setting_is_an_option_of_its_name():
    options = {action.dest for action in parser()._actions}
    assert {f.name for f in fields(Settings)} - NOT_OPTIONS <= options


def test_options_not_given_keep_the_settings_defaults():
    args = parser().parse_args(["--dataset", "wikitext-2", "--out", "o", "--no-progress"])
    settings = settings_of(args, {}, {})
    defaults = Settings("wikitext-2", "o", workers=args.workers, progress=False)
    assert settings == defaults


def prepare_command(shared_data, out) -> list[str]:
    source = shared_data / "wikitext-103"
    args = ["--dataset", "wikitext-103", "--source", source, "--out", out, "--workers", "2"]
    return [sys.executable, "-m", "data_pipeline", *map(str, args), "--no-progress"]


@pytest.mark.slow  # three real runs with their worker processes
def test_ctrl_c_is_one_line_and_the_same_command_goes_on(shared_data, tmp_path):
    """SIGINT to the whole group, as a terminal sends it: the workers stay silent, the command
    says so in one line and exits 130, and running it again finishes the same output."""
    out, whole = tmp_path / "out", tmp_path / "whole"
    popen = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    # As in a terminal: a suite started in the background inherits SIGINT ignored.
    popen["preexec_fn"] = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    with processes.process_group(prepare_command(shared_data, out), **popen) as proc:
        deadline = time.monotonic() + 60
        while not (out / ".prepare").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "txl-prepare did not start its units"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert stderr.splitlines()[-1] == INTERRUPTED_LINE and "Traceback" not in stderr
    processes.run(prepare_command(shared_data, out), timeout=300, check=True, cwd=REPO_ROOT)
    processes.run(prepare_command(shared_data, whole), timeout=300, check=True, cwd=REPO_ROOT)
    for split in ("train", "valid"):
        compared = filecmp.dircmp(out / split, whole / split)
        assert compared.left_list == compared.right_list and not compared.diff_files
