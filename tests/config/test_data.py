"""The data section: one dataset or a weighted mix of corpora, each mistake named in one line."""

import pytest

from tests.config.presets import preset
from txl_dist.config.sections import run_config_from_dict
from txl_dist.schema import ConfigError

MIX = [{"name": "web", "path": "a", "weight": 0.7}, {"name": "books", "path": "b", "weight": 0.3}]


@pytest.mark.parametrize(
    "data,message",
    [
        ({"mix": MIX, "path": "a"}, r"^data\.path and data\.mix are both set; keep one of them$"),
        ({}, r"^missing key data\.path \(or data\.mix, a list of corpora to mix\)$"),
        ({"mix": []}, r"^data\.mix is empty"),
        ({"mix": [MIX[0], {**MIX[1], "name": "web"}]}, r"^data\.mix names must be unique, web "),
        (
            {"mix": [MIX[0], {**MIX[1], "weight": 0}]},
            r"^data\.mix\[1\]\.weight must be a finite number > 0, got 0$",
        ),
        (
            {"mix": [MIX[0], {**MIX[1], "weight": float("inf")}]},
            r"^data\.mix\[1\]\.weight must be a finite number > 0, got inf$",
        ),
        (
            {"mix": [{**MIX[0], "weight": 1e308}, {**MIX[1], "weight": 1e308}]},
            r"^data\.mix weights \(1e\+308, 1e\+308\) sum to inf, beyond the range of normal",
        ),
        (
            {"mix": [{**MIX[0], "weight": 5e-324}, {**MIX[1], "weight": 5e-324}]},
            r"^data\.mix weights \(5e-324, 5e-324\) sum to 1e-323, beyond the range of normal",
        ),
        ({"mix": [MIX[0], {**MIX[1], "wieght": 1}]}, r"^unknown key data\.mix\[1\]\.wieght \(did"),
        ({"mix": [{"name": "web", "path": "a"}]}, r"^missing key data\.mix\[0\]\.weight$"),
        ({"mix": [{**MIX[0], "weight": "big"}]}, r"^data\.mix\[0\]\.weight must be float, got"),
    ],
)
def test_a_bad_mix_is_named_in_one_line(data, message):
    values = preset("tiny")
    values["data"] = data
    with pytest.raises(ConfigError, match=message):
        run_config_from_dict(values)


def test_a_mix_builds_typed_corpora():
    values = preset("tiny")
    values["data"] = {"mix": MIX}
    data = run_config_from_dict(values).data
    assert [(c.name, c.path, c.weight) for c in data.mix] == [
        ("web", "a", 0.7),
        ("books", "b", 0.3),
    ]
    assert data.root == "a" and data.path is None
