"""Checkpoints of an earlier layout still resume, exactly as the code that wrote them would.

tests/fixtures/checkpoint_v1/global_step4 is a version 1 checkpoint (2.4 MB), written at
commit ad34f16 from the repository root by

    .venv/bin/deepspeed --num_gpus 2 --master_port 29611 launch/pretrain.py \
        --config configs/tiny.json --set data.path=DATA --set train.out_dir=OUT \
        [--set S for each S of runs.TEST_SETTINGS and MODEL below] --set train.max_steps=4

on DATA prepared as the `own_vocabulary` fixture prepares it, then copied from OUT/checkpoints.
Resumed by that commit with train.max_steps=8, it logged RESUMED's losses.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from data_pipeline.cli import main as prepare_main
from tests.conftest import REPO_ROOT
from tests.integration.conftest import first_lines
from tests.integration.runs import records, train, train_losses

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "checkpoint_v1" / "global_step4"
# The tiny config made smaller: the checkpoint is a few MB.
MODEL = [
    "model.n_layer=2",
    "model.d_model=64",
    "model.d_embed=64",
    "model.d_inner=128",
    "model.n_head=2",
    "model.mem_len=32",
    "model.cutoffs=[]",
    "model.tie_projs=[false]",
    "model.div_val=1",
]
# What the writing commit logged resuming the fixture to step 8: train losses, the valid loss.
RESUMED = {5: 7.280867576599121, 6: 7.27528190612793, 7: 7.280276298522949, 8: 7.2662353515625}
VALID = 7.115456930175754
# Other CPUs round bf16 matmuls otherwise (one with AMX/avx512_bf16 logged 7.266231060028076 for
# step 8: 4.3e-6 off), so losses match to ABS, 23 times that. A break of the format is far
# beyond it (measured 2026-12-06 by breaking the resume): without Adam's state the train losses
# moved by up to 8.2e-3 and valid by 1.5e-2, without the memories by up to 7.4e-3 and 9.0e-4,
# without the RNG states (dropout) by up to 3.5e-3 and 1.4e-4.
ABS = 1e-4


@pytest.fixture(scope="module")
def own_vocabulary(shared_data, tmp_path_factory) -> Path:
    """conftest.first_lines with their own vocabulary (1,465 words)."""
    root = tmp_path_factory.mktemp("own_vocabulary")
    args = first_lines(shared_data, root / "src")
    assert prepare_main([*args, "--out", str(root / "data"), "--no-progress"]) == 0
    return root / "data"


def test_a_version_1_checkpoint_resumes_with_the_losses_its_code_logged(own_vocabulary, tmp_path):
    saved = tmp_path / "checkpoints" / FIXTURE.name
    shutil.copytree(FIXTURE, saved)  # a resume reads it only; the fixture stays as it is
    out = tmp_path / "resumed"
    overrides = [*MODEL, "train.max_steps=8"]
    proc = train(out, own_vocabulary, overrides=overrides, resume=str(saved))
    assert "resumed global_step4 at step 4" in proc.stdout
    assert train_losses(out) == pytest.approx(RESUMED, rel=0, abs=ABS)
    # It counted no tokens: each rank had seen its 4 rows of 64 tokens a step.
    seen = {r["step"]: r["tokens_seen"] for r in records(out) if "split" not in r}
    assert seen == {step: step * 4 * 64 for step in RESUMED}
    assert [r["loss"] for r in records(out) if r.get("split") == "valid"] == pytest.approx(
        [VALID], rel=0, abs=ABS
    )
