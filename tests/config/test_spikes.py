"""The `spikes` section: on by default, and every bad value named with its key."""

import pytest

from tests.config.presets import preset
from txl_dist.config.sections import run_config_from_dict
from txl_dist.schema import ConfigError


def test_the_detector_is_on_by_default():
    assert run_config_from_dict(preset("tiny")).spikes.enabled


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("window", 0, r"spikes\.window must be at least 1, got 0"),
        ("confirm_steps", 0, r"spikes\.confirm_steps must be at least 1"),
        ("rollback_window", 0, r"spikes\.rollback_window must be at least 1"),
        ("threshold", -1.0, r"spikes\.threshold must be >= 0, got -1\.0"),
        ("skip_steps", -1, r"spikes\.skip_steps must be >= 0"),
        ("treshold", 3.0, r"unknown key spikes\.treshold \(did you mean spikes\.threshold\?\)"),
    ],
)
def test_a_bad_spikes_value_is_named(key, value, message):
    values = preset("tiny")
    values["spikes"] = {key: value}
    with pytest.raises(ConfigError, match=message):
        run_config_from_dict(values)
