"""The run config's sections: every mistake is named with the key to change, before anything
starts."""

import pytest

from tests.config.presets import PRESETS, preset
from tests.conftest import REPO_ROOT
from txl_dist.config.loading import apply_overrides, load_run_config
from txl_dist.config.sections import run_config_from_dict
from txl_dist.schema import ConfigError


@pytest.mark.parametrize("name", PRESETS)
def test_presets_list_only_what_differs_from_the_defaults(name):
    values = preset(name)
    built = run_config_from_dict(values).to_dict()
    required = {"out_dir": "x", "global_rows": 1, "max_steps": 1}
    default = run_config_from_dict(
        {"model": {"n_token": 1}, "data": {"path": "x"}, "train": required, "deepspeed": {}}
    ).to_dict()
    for section, keys in values.items():
        if section == "deepspeed":  # DeepSpeed's own config: its defaults are DeepSpeed's
            continue
        for key, value in keys.items():
            if isinstance(value, dict):
                repeated = [k for k in value if built[section][key][k] == default[section][key][k]]
                assert not repeated, f"{name}: {section}.{key}.{repeated} repeat the defaults"
            else:
                assert built[section][key] != default[section][key], (
                    f"{name}: {section}.{key} repeats the default"
                )


def test_a_missing_required_key_is_named():
    values = preset("tiny")
    del values["train"]["out_dir"], values["train"]["max_steps"]
    with pytest.raises(ConfigError, match=r"^missing key train.out_dir, train.max_steps$"):
        run_config_from_dict(values)


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
        ("data", "read_attempts", 0, r"data\.read_attempts must be >= 1"),
        ("logging", "wandb", {"mode": "cloud"}, r"logging\.wandb\.mode must be one of"),
        ("model", "n_layer", 0, r"model\.n_layer must be positive"),
        ("train", "hang_timeout_s", 0, r"train\.hang_timeout_s must be positive, got 0"),
        ("train", "checkpoint_timeout_s", -1, r"train\.checkpoint_timeout_s must be positive"),
        ("train", "checkpoint_timeout_s", None, r"train\.checkpoint_timeout_s must be float"),
        ("train", "profile_steps", [5, 3], r"train\.profile_steps must be \[START, END\]"),
        ("train", "profile_steps", [0, 3], r"train\.profile_steps must be \[START, END\]"),
        ("train", "init_from", " ", r"train\.init_from is empty"),
        ("train", "init_from", 3, r"train\.init_from must be str"),
    ],
)
def test_bad_values_name_the_key(section, key, value, message):
    values = preset("tiny")
    values[section][key] = value
    with pytest.raises(ConfigError, match=message):
        run_config_from_dict(values)


def test_one_overflow_check_at_a_time():
    values = preset("tiny")
    values["deepspeed"]["bf16"]["check_grad_overflow"] = True
    with pytest.raises(ConfigError, match=r"check_grad_overflow=true and train\.norm_overflow"):
        run_config_from_dict(values)
    values["train"]["norm_overflow_check"] = False
    assert run_config_from_dict(values).ds.check_grad_overflow


def test_one_rank_runs_a_zero1_or_2_config_at_train_one_rank_stage():
    values = preset("wt103_base")  # ZeRO-2 with DeepSpeed's gradient buckets, bf16
    config = run_config_from_dict(values)
    assert config.at_world_size(2) is config
    zero = config.at_world_size(1).deepspeed["zero_optimization"]
    assert zero == {"stage": 1, "contiguous_gradients": False}
    values["deepspeed"]["zero_optimization"]["contiguous_gradients"] = True  # asked for: kept
    zero = run_config_from_dict(values).at_world_size(1).deepspeed["zero_optimization"]
    assert zero == {"stage": 1, "contiguous_gradients": True}
    values["deepspeed"]["zero_optimization"]["stage"] = 3  # chosen for its own sake: kept
    assert run_config_from_dict(values).at_world_size(1).zero_stage == 3
    values["deepspeed"]["zero_optimization"]["stage"] = 2
    values["train"]["one_rank_stage"] = None
    assert run_config_from_dict(values).at_world_size(1).zero_stage == 2
    values["train"]["one_rank_stage"] = 0
    with pytest.raises(ConfigError, match=r"one_rank_stage=0 needs fp32: DeepSpeed's ZeRO-0 in"):
        run_config_from_dict(values)
    values["deepspeed"]["bf16"]["enabled"] = False
    assert run_config_from_dict(values).at_world_size(1).zero_stage == 0
    values["train"]["one_rank_stage"] = 2
    with pytest.raises(ConfigError, match=r"train\.one_rank_stage must be 0, 1 or null, got 2"):
        run_config_from_dict(values)


def test_unknown_section_is_named():
    with pytest.raises(ConfigError, match=r"unknown key optimizer \(did you mean optim\?\)"):
        run_config_from_dict({**preset("tiny"), "optimizer": {}})


def test_config_public_dict_and_errors_never_show_secrets():
    values = preset("tiny")
    values["data"]["storage_options"] = {"key": "AKIA_SECRET_1", "secret": "SECRET_2"}
    values["data"]["path"] = "http://user:SECRET_3@127.0.0.1:1/wt103"
    public = str(run_config_from_dict(values).public_dict())
    assert not any(s in public for s in ("SECRET_1", "SECRET_2", "SECRET_3"))
    # A wrongly typed value is named, not echoed.
    bad = preset("tiny")
    bad["data"]["storage_options"] = '{"secret": "SECRET_4"'  # unparsable JSON from --set
    with pytest.raises(ConfigError) as err:
        run_config_from_dict(bad)
    assert "data.storage_options must be" in str(err.value) and "SECRET_4" not in str(err.value)
    # A --set with a wrong separator echoes only the key.
    with pytest.raises(ConfigError) as err:
        apply_overrides(preset("tiny"), ["data.storage_options.secret:SECRET_5"])
    assert "data.storage_options.secret" in str(err.value) and "SECRET_5" not in str(err.value)
    # A value with a space, split by TXL_SET: its second half is not echoed.
    env = ["data.storage_options.headers.Authorization=Bearer", "sk-live-SECRET_6"]
    with pytest.raises(ConfigError) as err:
        apply_overrides(preset("tiny"), [*env, "train.max_steps=3"], "TXL_SET")
    assert str(err.value) == (
        "TXL_SET entry 2 of 3 (not shown: it may hold a secret): expected section.key=value; "
        "TXL_SET splits at whitespace: set a value with spaces by --set"
    )


def test_a_string_under_an_ordinary_key_is_echoed_in_its_error():
    with pytest.raises(ConfigError, match=r"^model\.n_token must be int, got 'abc' \(str\)$"):
        run_config_from_dict(apply_overrides(preset("tiny"), ["model.n_token=abc"]))


@pytest.mark.parametrize(
    "settings, words",
    [
        (["deepspeed.zero_optimization.stage=3"], "does not work with ZeRO stage 3"),
        (["train.activation_checkpointing=true"], "exclude each other"),
    ],
)
def test_cuda_graphs_are_refused_where_a_graph_cannot_replay_the_layers(settings, words):
    with pytest.raises(ConfigError, match=f"train.cuda_graphs.*{words}"):
        load_run_config(
            str(REPO_ROOT / "configs/tiny.json"),
            ["model.n_token=12000", "train.cuda_graphs=true", *settings],
        )
