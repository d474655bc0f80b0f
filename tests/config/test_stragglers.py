"""The stragglers section: on by default, warning; bad values named with their key."""

import pytest

from tests.config.presets import preset
from txl_dist.config.sections import run_config_from_dict
from txl_dist.schema import ConfigError


def test_on_by_default_naming_only():
    config = run_config_from_dict(preset("tiny")).stragglers
    assert config.enabled and config.policy == "warn"


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("policy", "kill", r"stragglers\.policy must be warn or stop, got 'kill'"),
        ("interval", 0, r"stragglers\.interval must be at least 1, got 0"),
        ("consecutive", 0, r"stragglers\.consecutive must be at least 1, got 0"),
        ("threshold", 1.5, r"stragglers\.threshold must be between 0 and 1, got 1\.5"),
        ("individual_threshold", 0, r"stragglers\.individual_threshold must be between 0 and 1"),
        ("min_share", 1, r"stragglers\.min_share must be in \[0, 1\), got 1"),
        ("treshold", 0.5, r"unknown key stragglers\.treshold \(did you mean stragglers\.thresh"),
    ],
)
def test_bad_values_name_the_key(key, value, message):
    values = preset("tiny")
    values["stragglers"] = {key: value}
    with pytest.raises(ConfigError, match=message):
        run_config_from_dict(values)
