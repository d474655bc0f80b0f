"""A run config from its file and overrides: every mistake is named with the key or entry to
change, and where it came from."""

import json
import traceback

import pytest

from data_pipeline.cli import main as prepare_main
from tests.config.presets import preset
from tests.conftest import REPO_ROOT
from txl_dist.config.loading import apply_overrides, load_run_config, naming_txl_set
from txl_dist.config.sections import run_config_from_dict
from txl_dist.schema import ConfigError


def test_n_token_auto_reads_the_vocabulary_size_of_the_data(tmp_path, shared_data):
    text = shared_data / "wikitext-2" / "valid.txt"  # over 10,000 types: tiny's cutoffs fit
    data = tmp_path / "data"
    assert prepare_main(["--dataset", "text", "--source", str(text), "--out", str(data)]) == 0
    # a file named valid.txt is the valid split; the vocabulary comes from the training split
    vocab_size = json.loads((data / "valid" / "manifest.json").read_text())["vocab_size"]
    tiny_config = str(REPO_ROOT / "configs/tiny.json")
    config = load_run_config(tiny_config, [f"data.path={data}", "data.train_split=valid"])
    assert config.model.n_token == vocab_size
    with pytest.raises(ConfigError, match=r"model\.n_token=auto .* not found.* txl-prepare"):
        load_run_config(tiny_config, [f"data.path={tmp_path / 'missing'}"])
    unreachable = "http://alice:SECRET_7@127.0.0.1:1/data"  # port 1: refused at once
    with pytest.raises(ConfigError, match=r"model\.n_token=auto .* http://\*\*\*@127") as err:
        # data.read_attempts holds here too: one try, no back-off (6 tries took 4.4 s).
        load_run_config(tiny_config, [f"data.path={unreachable}", "data.read_attempts=1"])
    assert "SECRET_7" not in "".join(traceback.format_exception(err.value))


def test_overrides_parse_json_and_reach_nested_keys():
    values = apply_overrides(
        preset("tiny"),
        ["train.max_steps=7", "deepspeed.zero_optimization.stage=3", "data.path=s3://b/x"],
    )
    config = run_config_from_dict(values)
    assert config.train.max_steps == 7 and config.zero_stage == 3
    assert config.data.path == "s3://b/x"
    with pytest.raises(ConfigError, match="expected section.key=value"):
        apply_overrides(preset("tiny"), ["max_steps"])


def test_txl_set_overrides_apply_after_set_and_are_named_in_errors(tmp_path):
    path = tmp_path / "wt103_base.json"
    path.write_text(json.dumps(preset("wt103_base")))
    config = load_run_config(
        str(path), ["train.max_steps=100", "train.seed=7"], ["train.max_steps=3"]
    )
    assert config.train.max_steps == 3 and config.train.seed == 7
    with pytest.raises(ConfigError, match=r"^TXL_SET entry 1 of 1 \(not shown: .*section\.key"):
        load_run_config(str(path), [], ["max_steps=3"])
    with pytest.raises(ConfigError, match=r"^TXL_SET model\.d_model\.x: d_model is not a section"):
        load_run_config(str(path), [], ["model.d_model.x=1"])


def test_an_error_naming_a_txl_set_key_says_it_came_from_txl_set():
    env = ["train.max_steps=0", "logging.log_interval=1"]
    with pytest.raises(ConfigError) as err:
        run_config_from_dict(apply_overrides(preset("tiny"), env, "TXL_SET"))
    assert naming_txl_set(str(err.value), env) == (
        "train.max_steps must be at least 1, got 0 "
        "(train.max_steps set by TXL_SET in the environment)"
    )
    # a key merely beginning like it is not the one set
    assert naming_txl_set("train.max_steps_x is wrong", env) == "train.max_steps_x is wrong"


@pytest.mark.parametrize(
    "value, why",
    [
        ('{"key": "sk-Secret1"', "Expecting ',' delimiter at character 20"),
        ("{key: sk-Secret1}", "Expecting property name enclosed in double quotes at character 1"),
        ('["sk-Secret1" "x"]', "Expecting ',' delimiter at character 14"),
    ],
)
def test_a_malformed_json_value_is_named_without_echoing_it(value, why):
    with pytest.raises(ConfigError) as err:
        load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), [f"data.storage_options={value}"])
    assert str(err.value) == (
        f"--set data.storage_options: the value is not valid JSON ({why}); quote it for the "
        """shell, e.g. --set 'data.storage_options={"key": 1}'"""
    )
    with pytest.raises(ConfigError) as err:  # a text where an object belongs is not echoed
        load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), ["data.storage_options=k=v"])
    assert str(err.value).startswith("data.storage_options must be a JSON object, got a str: ")
