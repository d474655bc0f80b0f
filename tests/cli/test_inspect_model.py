"""txl-inspect reports the paper's parameter counts for its configs."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def inspect(config: str, world_size: int = 4) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "txl_dist.cli.inspect_model",
            "--config",
            str(REPO_ROOT / config),
            "--world-size",
            str(world_size),
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


@pytest.mark.parametrize(
    "config,millions", [("configs/wt103_base.json", 151.1), ("configs/large.json", 285.2)]
)
def test_parameter_count_matches_the_paper(config, millions):
    report = inspect(config)
    assert report["parameters"] == pytest.approx(millions * 1e6, rel=0.003)
    assert (
        report["embedding_parameters"] + report["non_embedding_parameters"] == report["parameters"]
    )


def test_zero_memory_follows_the_zero_paper():
    report = inspect("configs/large.json", world_size=4)
    params, per_rank = report["parameters"], report["zero_bytes_per_rank"]
    assert per_rank["0"] == 16 * params
    assert per_rank["1"] == pytest.approx((4 + 12 / 4) * params)
    assert per_rank["2"] == pytest.approx((2 + 14 / 4) * params)
    assert per_rank["3"] == pytest.approx(16 / 4 * params)
    assert report["train_flops_per_token"] > 6 * report["non_embedding_parameters"]
