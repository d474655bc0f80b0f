import pytest

from txl_dist.model import TXLConfig
from txl_dist.schema import ConfigError


def test_unknown_key_names_the_closest_valid_one():
    with pytest.raises(ConfigError, match=r"model\.n_layers.*did you mean model\.n_layer"):
        TXLConfig.from_dict({"n_layers": 4})


@pytest.mark.parametrize(
    "values,message",
    [
        ({"d_model": "256"}, r"model\.d_model must be int"),
        ({"dropout": True}, r"model\.dropout must be float"),
        ({"cutoffs": [10, "x"]}, r"model\.cutoffs must be list\[int\]"),
        ({"cutoffs": [500, 100]}, r"model\.cutoffs must be strictly increasing"),
        (
            {"n_token": 100, "cutoffs": [50], "tie_projs": [True]},
            r"tie_projs needs one entry per cluster",
        ),
        ({"same_length": True, "mem_len": 0}, r"same_length needs mem_len"),
        ({"width_multiple": 0}, r"model\.width_multiple must be 1 or more, got 0"),
        ({"position_row_multiple": -8}, r"model\.position_row_multiple must be 1 or more"),
        ({"fused_kernel": "yes"}, r"model\.fused_kernel must be bool"),
    ],
)
def test_bad_values_say_what_to_change(values, message):
    with pytest.raises(ConfigError, match=message):
        TXLConfig.from_dict(values)


def test_round_trip_and_eval_lengths():
    config = TXLConfig.from_dict({"tgt_len": 150, "eval_tgt_len": 64, "eval_mem_len": 640})
    assert TXLConfig.from_dict(config.to_dict()) == config
    evaluated = config.for_eval()
    assert (evaluated.tgt_len, evaluated.mem_len, evaluated.clamp_len) == (64, 640, -1)
    assert config.tgt_len == 150


def test_a_config_saved_before_the_switches_were_keys_loads_with_today_s_behaviour():
    """Checkpoints and exports written before fused_kernel, width_multiple and
    position_row_multiple were keys: the kernel off, widths as configured, rows of 8."""
    old = {k: v for k, v in TXLConfig().to_dict().items() if not k.endswith(("kernel", "multiple"))}
    assert len(old) == len(TXLConfig().to_dict()) - 3
    config = TXLConfig.from_dict(old)
    assert (config.fused_kernel, config.width_multiple, config.position_row_multiple) == (
        False,
        1,
        8,
    )
