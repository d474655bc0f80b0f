"""txl-inspect reports the paper's parameter counts for its configs."""

import contextlib
import io
import json

import pytest

from tests.conftest import REPO_ROOT
from txl_dist.cli.inspect_model import inspect_config, main

PAPER_CONFIGS = ("configs/wt103_base.json", "configs/large.json")


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    """config -> txl-inspect's --json line for it at world size 4: one call for every config,
    in this process (the model is built on the meta device: no process start is needed)."""
    args = ["--world-size", "4", "--json"]
    args += ["--config", *(str(REPO_ROOT / config) for config in PAPER_CONFIGS)]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(args) is None
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == len(PAPER_CONFIGS)
    return dict(zip(PAPER_CONFIGS, lines))


@pytest.mark.parametrize("config,millions", [(PAPER_CONFIGS[0], 151.1), (PAPER_CONFIGS[1], 285.2)])
def test_parameter_count_matches_the_paper(reports, config, millions):
    report = reports[config]
    assert report["parameters"] == pytest.approx(millions * 1e6, rel=0.003)
    assert (
        report["embedding_parameters"] + report["non_embedding_parameters"] == report["parameters"]
    )


# (parameters, embedding parameters) of the reference architecture: kimiyoung/transformer-xl's
# pytorch/mem_transformer.py MemTransformerLM built on the meta device with each config's
# arguments as its run_*.sh scripts pass them (n_token 204 for enwik8 and 27 for text8 as its
# Corpus builds them, cutoffs [], div_val 1, tie_weight, d_embed = d_model, attn_type 0), and
# counted with sum(p.numel() for p in model.parameters()) in a one-off script outside this
# repository (the reference's utils/ on sys.path, torch.version.cuda set for its import); its
# embedding figure is word_emb plus the output bias (the output weight is tied to word_emb).
REFERENCE_PARAMETERS = {
    "enwik8_base": (41_055_436, 104_652),
    "enwik8_large": (277_231_820, 209_100),
    "text8_large": (277_050_395, 27_675),
}


@pytest.mark.parametrize("config", sorted(REFERENCE_PARAMETERS))
def test_char_level_configs_have_the_reference_architectures_parameter_count(config):
    report = inspect_config(str(REPO_ROOT / f"configs/{config}.json"), world_size=8)  # meta
    assert (report.parameters, report.embedding_parameters) == REFERENCE_PARAMETERS[config]


def test_zero_memory_follows_the_zero_paper(reports):
    report = reports["configs/large.json"]
    params, per_rank = report["parameters"], report["zero_bytes_per_rank"]
    assert per_rank["0"] == 16 * params
    assert per_rank["1"] == pytest.approx((4 + 12 / 4) * params)
    assert per_rank["2"] == pytest.approx((2 + 14 / 4) * params)
    assert per_rank["3"] == pytest.approx(16 / 4 * params)
    assert report["train_flops_per_token"] > 6 * report["non_embedding_parameters"]


def test_the_async_save_snapshot_is_rank_0s_weights_and_a_share_of_the_optimizer():
    # wt103_base: bf16, ZeRO-2, 60 global rows; at 2 ranks a micro batch of 30 rows.
    report = inspect_config(str(REPO_ROOT / "configs/wt103_base.json"), 2)
    assert report.micro_rows == 30
    params, (first, others) = report.parameters, report.snapshot_bytes
    memories = 16 * 30 * 150 * 410 * 2  # layers x rows per rank x mem_len x d_model x bf16
    assert others == pytest.approx(12 / 2 * params + memories + 2**20)
    assert first == pytest.approx(others + 2 * params)
