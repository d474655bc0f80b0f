"""A rank slowed through the real command (TXL_INJECT_SLOW) in a 2-rank DeepSpeed run: named
with its section within stragglers.consecutive intervals, and under policy=stop the run
checkpoints and exits STRAGGLER_EXIT_CODE, its stop file naming the host to exclude. (Equal
ranks over 300 steps, too long a run for the suite, were checked by hand: docs/training.md.)"""

from __future__ import annotations

import json
import os
import re

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.runs import command, records
from txl_dist.engine import checkpoint
from txl_dist.engine.health.slow_injection import ENV
from txl_dist.engine.health.stragglers import STRAGGLER_EXIT_CODE, host_name

INTERVAL = 20  # at load 20 on 2 cores, 5-step medians of equal ranks differ by up to 1.5x
# 2x, not 1.5x: a 1.5x rank's quartiles run 1.47-1.70x its peer's on a loaded machine, at the
# threshold's 1.33x, and CI once named it only at step 80 (docs/training.md, Slow ranks).
FACTOR = 2.0


def test_a_slowed_rank_is_named_and_stop_checkpoints_and_exits_76(wikitext, tmp_path):
    out, stop_file = tmp_path / "slowed", tmp_path / "stopped.json"
    settings = ["train.max_steps=200", "stragglers.policy=stop", f"stragglers.interval={INTERVAL}"]
    cmd = command(out, wikitext, 2, settings, None) + ["--stop-file", str(stop_file)]
    env = {**os.environ, ENV: f"1:{FACTOR}:forward_backward"}
    proc = processes.run(cmd, timeout=900, cwd=REPO_ROOT, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == STRAGGLER_EXIT_CODE, output[-3000:]
    line = re.search(r"straggler: rank (\d) \(host (\S+)\) (\w+) [\d.]+ ms a step against", output)
    assert line, output[-3000:]
    assert line.groups() == ("1", host_name(), "forward_backward")
    (named,) = [r for r in records(out) if r.get("event") == "straggler"]
    assert (named["rank"], named["section"]) == (1, "forward_backward")
    assert named["step"] <= 3 * INTERVAL  # within three intervals of the start
    assert named["seconds"] > named["median_s"] and named["relative"] < 0.75
    # The run stopped at that step with a checkpoint, as a stop signal would have it stop.
    step = named["step"]
    ratio = named["seconds"] / named["median_s"]
    print(f"rank 1 slowed {FACTOR}x named at step {step} ({ratio:.2f}x)")
    assert f"stopping at step {step}: straggler rank 1 (host {host_name()}) in" in output
    assert (out / "checkpoints" / checkpoint.LATEST).read_text() == f"global_step{step}"
    assert json.loads(stop_file.read_text()) == dict(
        step=step,
        reason=f"straggler rank 1 (host {host_name()}) in forward_backward",
        checkpoints=str(out / "checkpoints"),
        exclude=host_name(),
    )
