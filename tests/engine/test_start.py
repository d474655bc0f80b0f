"""A run's start before any process group: a finished run resumed with `--resume auto` ends
here, and one rank says which ZeRO stage it runs a ZeRO-2 config at."""

import logging
import shutil

from tests.conftest import REPO_ROOT
from txl_dist.engine.start import RunRequest, load_config, prepare_run
from txl_dist.process.dist import World

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "checkpoint_v1" / "global_step4"  # 2 ranks, ZeRO 1


def finished_run(tmp_path, max_steps: int) -> RunRequest:
    """A run directory whose latest checkpoint is the fixture's step 4; the request resuming it."""
    checkpoints = tmp_path / "run" / "checkpoints"
    shutil.copytree(FIXTURE, checkpoints / FIXTURE.name)
    (checkpoints / "latest").write_text(FIXTURE.name)
    settings = [f"train.out_dir={tmp_path / 'run'}", f"train.max_steps={max_steps}"]
    settings.append("model.n_token=12000")  # no data: prepare_run ends before reading it
    return RunRequest(str(REPO_ROOT / "configs/tiny.json"), settings, [], "auto", False)


def test_a_finished_run_resumed_auto_is_no_run_and_says_so_on_one_rank(tmp_path, caplog):
    request = finished_run(tmp_path, max_steps=4)
    world = World(0, 1, 0)
    with caplog.at_level(logging.INFO, logger="txl_dist"):
        config = load_config(request, world)
        assert config.zero_stage == 2  # configs/tiny.json
        assert prepare_run(config, request, world) is None
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("one rank: ZeRO-2 runs as ZeRO-1, ") for line in lines), lines
    assert any("already finished: global_step4 reached train.max_steps=4" in x for x in lines)


def test_two_ranks_keep_the_configured_stage_and_say_nothing_of_it(tmp_path, caplog):
    request = finished_run(tmp_path, max_steps=4)
    world = World(1, 2, 1)  # not the main rank: no lines at all
    with caplog.at_level(logging.INFO, logger="txl_dist"):
        assert prepare_run(load_config(request, world), request, world) is None
    assert [r.getMessage() for r in caplog.records] == []
