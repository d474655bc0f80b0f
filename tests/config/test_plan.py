"""The run plan: every shipped config's batch layout on 1, 2 and 8 ranks (and more), evaluation
rows and precision, derived once and read alike by txl-pretrain, txl-inspect and txl-export."""

import json

import pytest

from tests.config.presets import PRESETS, preset
from tests.conftest import REPO_ROOT
from txl_dist.cli.inspect_model import inspect_config
from txl_dist.config.loading import apply_overrides
from txl_dist.config.sections import run_config_from_dict
from txl_dist.engine.checkpoint import CheckpointState
from txl_dist.engine.checkpoint.card import readme
from txl_dist.engine.checkpoint.consolidate import open_checkpoint
from txl_dist.model.accounting import activation_bytes_per_row
from txl_dist.schema import ConfigError


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_runs_on_cluster_sizes_or_says_which(name):
    config = run_config_from_dict(preset(name))
    rows = config.train.global_rows
    limit = config.train.max_micro_rows or rows  # no cap: a rank's rows in one micro batch
    for world_size in (1, 2, 4, 8, 16, 32, 64):
        if rows % world_size == 0:
            plan = config.plan(world_size)
            assert plan.micro_rows * plan.accumulation * world_size == plan.global_rows == rows
            assert plan.micro_rows <= limit
            # the largest micro batch under the limit: fewer, fuller steps
            micro = plan.micro_rows
            assert all((rows // world_size) % m or m > limit for m in range(micro + 1, limit + 1))
            assert plan.eval_rows == rows and plan.eval_rows_per_rank == rows // world_size
            assert plan.precision == "bf16" and plan.dtype_bytes == 2
        else:
            with pytest.raises(ConfigError) as err:
                config.plan(world_size)
            message = str(err.value)
            assert "\n" not in message and f"does not split evenly over {world_size}" in message
            assert "this config runs on 1, " in message and "set train.global_rows" in message


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_every_preset_plans_on_1_2_and_8_ranks_or_refuses_in_one_line(name, world_size):
    config = run_config_from_dict(preset(name))
    try:
        plan = config.plan(world_size)
    except ConfigError as err:
        assert "\n" not in str(err) and "train.global_rows" in str(err)
        assert config.train.global_rows % world_size  # refused only where it cannot split
        return
    assert plan.world_size == world_size
    assert plan.micro_rows * plan.accumulation * world_size == config.train.global_rows
    assert plan.rows_per_rank * world_size == plan.global_rows


def test_the_batch_layout_is_derived_or_pinned_and_inconsistency_refused():
    values = preset("tiny")  # global_rows 8, no max_micro_rows
    assert layout(run_config_from_dict(values).plan(world_size=1)) == (8, 1)
    values["train"]["max_micro_rows"] = 4
    config = run_config_from_dict(values)
    assert layout(config.plan(world_size=2)) == (4, 1)
    assert layout(config.plan(world_size=1)) == (4, 2)
    with pytest.raises(ConfigError, match=r"global_rows=8 does not split evenly over 3 ranks"):
        config.plan(world_size=3)
    config.deepspeed["train_micro_batch_size_per_gpu"] = 2  # pinned: accumulation derived
    assert layout(config.plan(world_size=2)) == (2, 2)
    config.deepspeed["gradient_accumulation_steps"] = 4
    with pytest.raises(ConfigError, match="gradient_accumulation_steps \\(4\\)"):
        config.plan(world_size=2)
    config.deepspeed.update(gradient_accumulation_steps=2, train_batch_size=16)
    with pytest.raises(ConfigError, match=r"^deepspeed.train_batch_size=16 differs from train"):
        config.plan(world_size=2)


def layout(plan) -> tuple[int, int]:
    return plan.micro_rows, plan.accumulation


def test_evaluation_rows_must_split_over_the_ranks_and_are_refused_naming_the_key():
    config = run_config_from_dict(apply_overrides(preset("tiny"), ["train.eval_rows=6"]))
    assert config.plan(world_size=2).eval_rows_per_rank == 3
    with pytest.raises(ConfigError) as err:
        config.plan(world_size=4)
    assert str(err.value) == (
        "train.eval_rows=6 must be a multiple of the world size 4; set train.eval_rows to a "
        "multiple of 4 (e.g. 8)"
    )
    config.train.eval_rows = None  # null: the global batch's rows
    assert config.plan(world_size=4).eval_rows_per_rank == 2


@pytest.mark.parametrize(
    "settings,precision",
    [
        (["deepspeed.bf16.enabled=false"], "fp32"),
        ([], "bf16"),
        (["deepspeed.bf16.enabled=false", "deepspeed.fp16.enabled=true"], "fp16"),
    ],
)
def test_precision_agrees_in_training_inspect_and_export(tmp_path, settings, precision):
    settings = ["model.n_token=12000", *settings]
    values = apply_overrides(preset("tiny"), settings)
    plan = run_config_from_dict(values).plan(world_size=2)  # what the training engine runs
    assert plan.precision == precision
    assert plan.low_precision == (precision != "fp32")

    report = inspect_config(str(REPO_ROOT / "configs" / "tiny.json"), 2, settings)
    model = run_config_from_dict(values).model
    assert report.activation_bytes_per_row == activation_bytes_per_row(model, plan.dtype_bytes)

    tag = tmp_path / "checkpoints" / "global_step3"
    tag.mkdir(parents=True)
    state = CheckpointState(3, 1, 8, 4, values, 12000, "ab" * 32)  # one rank: txl.json its file
    (tag / "txl.json").write_text(state.to_json())
    text = readme(open_checkpoint(str(tag)), "fp32", "torch")
    assert f"ZeRO stage 2 on 1 rank, {precision}, 8 global rows" in text
    assert f"Settings: {precision}, 8 rows" in text and f"--dtype {precision}" in text


def test_bf16_and_fp16_at_once_are_refused_before_the_engine():
    values = apply_overrides(preset("tiny"), ["deepspeed.fp16.enabled=true"])
    with pytest.raises(ConfigError, match=r"bf16.enabled and deepspeed.fp16.enabled are both"):
        run_config_from_dict(values).plan(world_size=1)


def test_the_deepspeed_section_is_read_by_name_with_its_defaults():
    ds = run_config_from_dict(preset("tiny")).ds
    assert (ds.zero_stage, ds.precision, ds.gradient_clipping) == (2, "bf16", 0.25)
    assert (ds.micro_rows, ds.accumulation, ds.train_batch_size) == (None, None, None)
    bare = run_config_from_dict({**preset("tiny"), "deepspeed": {}}).ds
    assert (bare.zero_stage, bare.precision, bare.gradient_clipping) == (0, "fp32", 0.0)
    assert json.dumps(bare.section) == "{}"  # reading added nothing DeepSpeed would then see
