"""Config errors: every unknown key, wrong type and missing key of a config at once."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT
from txl_dist.config.loading import load_run_config
from txl_dist.model import TXLConfig
from txl_dist.schema import ConfigError

TINY = str(REPO_ROOT / "configs" / "tiny.json")


def test_every_unknown_key_and_wrong_type_is_reported_at_once():
    overrides = [
        "model.n_token=12000", "train.max_step=10", "train.keep_last=two", "optim.lr_warmup=5",
        "data.storage_options=abc", "logging.wandb.mod=offline", "train.seed=1.5",
    ]  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_run_config(TINY, overrides)
    lines = str(err.value).splitlines()
    assert lines[0] == "6 problems in the config:"
    assert sorted(lines[1:]) == sorted([
        "  unknown key train.max_step (did you mean train.max_steps?)",
        "  train.keep_last must be int, got 'two' (str)",
        "  train.seed must be int, got 1.5 (float)",
        "  unknown key logging.wandb.mod (did you mean logging.wandb.mode?)",
        "  data.storage_options must be a JSON object, got '***' (str)",
        lines[[line.startswith("  unknown key optim.lr_warmup") for line in lines].index(True)],
    ])  # fmt: skip


def test_one_problem_is_one_line_and_values_are_checked_in_sections_that_built():
    with pytest.raises(ConfigError) as err:
        load_run_config(TINY, ["model.n_token=12000", "train.max_step=10"])
    assert str(err.value) == "unknown key train.max_step (did you mean train.max_steps?)"
    # a section whose keys are right has its values checked beside another section's typo
    with pytest.raises(ConfigError) as err:
        load_run_config(TINY, ["model.n_token=12000", "train.max_step=10", "logging.wandb.mode=x"])
    assert str(err.value).startswith("2 problems in the config:\n  unknown key train.max_step")
    assert "  logging.wandb.mode must be one of" in str(err.value)


def test_the_model_config_too():
    with pytest.raises(ConfigError) as err:
        TXLConfig.from_dict({"n_token": "many", "n_layr": 2, "d_model": 8.5})
    assert str(err.value).splitlines()[1:] == [
        "  model.n_token must be int, got 'many' (str)",
        "  unknown key model.n_layr (did you mean model.n_layer?)",
        "  model.d_model must be int, got 8.5 (float)",
    ]
