"""The run config: every mistake is named with the key to change, before anything starts."""

import json

import pytest

from tests.conftest import REPO_ROOT
from txl_dist.config import ConfigError, apply_overrides, load_run_config, run_config_from_dict


def tiny() -> dict:
    return json.loads((REPO_ROOT / "configs/tiny.json").read_text())


@pytest.mark.parametrize("name", ["tiny", "wt103_base", "large", "lm1b_base", "lm1b_large"])
def test_shipped_configs_load(name):
    config = load_run_config(str(REPO_ROOT / f"configs/{name}.json"))
    assert config.train.global_rows % config.deepspeed["train_micro_batch_size_per_gpu"] == 0


@pytest.mark.parametrize(
    "section,key,value,message",
    [
        (
            "train",
            "max_step",
            10,
            r"unknown key train\.max_step \(did you mean train\.max_steps\?\)",
        ),
        ("optim", "lr", "fast", r"optim\.lr must be float, got 'fast'"),
        ("train", "global_rows", 2.5, r"train\.global_rows must be int"),
        ("data", "order", "random", r"data\.order must be 'corpus' or 'shuffle'"),
        ("logging", "wandb", {"mode": "cloud"}, r"logging\.wandb\.mode must be one of"),
        ("model", "n_layer", 0, r"model\.n_layer must be positive"),
    ],
)
def test_bad_values_name_the_key(section, key, value, message):
    values = tiny()
    values[section][key] = value
    with pytest.raises(ConfigError, match=message):
        run_config_from_dict(values)


def test_unknown_section_is_named():
    with pytest.raises(ConfigError, match=r"unknown section 'optimizer' \(did you mean optim\?\)"):
        run_config_from_dict({**tiny(), "optimizer": {}})


def test_overrides_parse_json_and_reach_nested_keys():
    values = apply_overrides(
        tiny(), ["train.max_steps=7", "deepspeed.zero_optimization.stage=3", "data.path=s3://b/x"]
    )
    config = run_config_from_dict(values)
    assert config.train.max_steps == 7 and config.zero_stage == 3
    assert config.data.path == "s3://b/x"
    with pytest.raises(ConfigError, match="expected section.key=value"):
        apply_overrides(tiny(), ["max_steps"])


def test_batch_layout_derives_accumulation_and_refuses_inconsistency():
    config = run_config_from_dict(tiny())  # global_rows 8, micro 4
    assert config.batch_layout(world_size=2) == (4, 1)
    assert config.batch_layout(world_size=1) == (4, 2)
    with pytest.raises(ConfigError, match=r"global_rows=8 must equal world size 3"):
        config.batch_layout(world_size=3)
    config.deepspeed["gradient_accumulation_steps"] = 4
    with pytest.raises(ConfigError, match="gradient_accumulation_steps \\(4\\)"):
        config.batch_layout(world_size=2)
