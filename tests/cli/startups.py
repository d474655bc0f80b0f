"""Several start-ups of launch/pretrain.py that end before training, in one process start.

Each start-up takes a few seconds of importing torch and DeepSpeed; a refusal then takes
milliseconds. The child runs launch/pretrain.py's own preamble once (as the command does before
its main()), then the command's main() once per case, with that case's arguments and
environment, and reports each case's exit code, stdout and stderr. A start-up that is refused
ends main() with SystemExit before it starts a process group or trains, so the cases cannot
see each other.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from tests import processes
from tests.conftest import REPO_ROOT

CHILD = """
import contextlib, io, json, os, runpy, sys
runpy.run_path("launch/pretrain.py", run_name="preamble")
from txl_dist.cli.pretrain import main
base, results = dict(os.environ), []
for argv, env in json.loads(sys.argv[1]):
    os.environ.clear()
    os.environ.update({**base, **env})
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as end:
            code = end.code
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


@dataclasses.dataclass
class Ended:
    """How one start-up ended."""

    returncode: int  # main()'s exit code (0 when it returned)
    stdout: str  # what it printed and logged to stdout
    stderr: str  # what it printed and logged to stderr
    process_stdout: str  # the whole child's stdout, whatever bypassed sys.stdout included
    process_stderr: str  # the whole child's stderr outside the cases (its imports' lines)


def tiny(*settings: object, options: tuple = ()) -> list[str]:
    """launch/pretrain.py's arguments: the tiny config, `options`, then each setting's --set."""
    sets = [arg for setting in settings for arg in ("--set", str(setting))]
    return ["--config", "configs/tiny.json", *map(str, options), *sets]


def start_ups(cases: list[tuple[list[str], dict[str, str]]]) -> list[Ended]:
    """Run launch/pretrain.py with each (arguments, environment changes) case in one child
    whose TXL_SET is empty; the cases' endings, in order."""
    env = {**os.environ, "TXL_SET": ""}
    cases = [([str(arg) for arg in argv], changes) for argv, changes in cases]
    args = [sys.executable, "-c", CHILD, json.dumps(cases)]
    proc = processes.run(args, timeout=300, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    return [Ended(*result, proc.stdout, proc.stderr) for result in results]
