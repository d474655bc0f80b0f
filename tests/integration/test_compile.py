"""train.compile: the losses and evaluation of the eager run, and no recompile per step."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.runs import eval_ppl, train, train_losses
from txl_dist.config.loading import load_run_config
from txl_dist.schema import ConfigError

STEPS = 6  # a recompile per step would show 4 or more
# fp32 on one process (`python launch/pretrain.py`), so the two runs differ only by compile;
# no dropout: inductor draws its masks from its own generator, so they differ from eager's.
FP32 = [f"train.max_steps={STEPS}", "deepspeed.bf16.enabled=false", "model.dropout=0.0"]


def test_compiled_run_matches_eager_and_compiles_each_shape_once(wikitext, tmp_path):
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    train(eager, wikitext, nprocs=1, overrides=FP32)
    proc = train(
        compiled,
        wikitext,
        nprocs=1,
        overrides=[*FP32, "train.compile=true"],
        env={"TORCH_LOGS": "recompiles"},
    )
    # Two graphs whatever the run's length: a row's first segment (no memory), then mem_len.
    # The final evaluation runs eager, so it compiles nothing.
    recompiles = (proc.stdout + proc.stderr).count("Recompiling function")
    assert recompiles == 1, (proc.stdout + proc.stderr)[-3000:]

    expected, got = train_losses(eager), train_losses(compiled)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, loss in expected.items():
        assert got[step] == pytest.approx(loss, abs=1e-3), step
    assert eval_ppl(compiled) == pytest.approx(eval_ppl(eager), rel=1e-4)


def test_compile_with_zero3_is_refused():
    settings = ["model.n_token=12000", "train.compile=true", "deepspeed.zero_optimization.stage=3"]
    with pytest.raises(ConfigError, match="train.compile does not work with ZeRO stage 3"):
        load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), settings)
