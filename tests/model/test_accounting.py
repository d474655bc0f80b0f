"""What txl-inspect and MFU take from accounting is close to what the model really does: the
FLOPs of a forward as torch counts them, the activations autograd keeps."""

import dataclasses
import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import REPO_ROOT
from txl_dist.cli.inspect_model import inspect_config
from txl_dist.config.loading import load_run_config
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.accounting import (
    TAIL_TARGET_SHARE,
    activation_bytes_per_row,
    forward_flops_per_token,
    rank_memory_bytes,
)
from txl_dist.model.adaptive import cluster_bounds

SHIPPED_CONFIGS = sorted(path.name for path in (REPO_ROOT / "configs").glob("*.json"))
FLOP_ROWS = 2  # more than one row: the position projection is shared by the rows of a forward


def counted_flops_per_token(config: TXLConfig, rows: int) -> float:
    """FLOPs torch counts in one forward with full memory, targets in the head cluster. FLOPs
    depend on shapes alone: the model and inputs are meta tensors (no storage, no arithmetic),
    the cluster sizes, the one step that reads values, are taken on the host as a step does."""
    torch.manual_seed(0)
    head = config.cutoffs[0] if config.cutoffs else config.n_token
    targets = torch.randint(0, head, (rows, config.tgt_len))
    with torch.device("meta"):
        # No initial values: drawing them (on the CPU, for meta too) took a second for lm1b's
        model = TransformerXL(config, init_weights=False).eval()
        input_ids = torch.zeros(rows, config.tgt_len, dtype=torch.long)
        mems = [torch.zeros(rows, config.mem_len, config.d_model)] * config.n_layer
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        sizes = model.cluster_sizes(targets)
        model(input_ids, targets.to("meta"), mems, cluster_sizes=sizes)
    return counter.get_total_flops() / (rows * config.tgt_len)


def shipped_model(name: str) -> TXLConfig:
    """A shipped config's model; an `auto` vocabulary (read from the data) becomes 32,000."""
    path = REPO_ROOT / "configs" / name
    auto = json.loads(path.read_text())["model"]["n_token"] == "auto"
    return load_run_config(str(path), ["model.n_token=32000"] if auto else []).model


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_forward_flops_match_torchs_count_for_every_shipped_config(name):
    """At the config's own widths, lengths and vocabulary; only the layers are cut to two (the
    formula is linear in them) so the largest configs run in seconds on a CPU."""
    model = shipped_model(name)
    config = dataclasses.replace(model, n_layer=min(model.n_layer, 2))
    counted = counted_flops_per_token(config, FLOP_ROWS)
    assert forward_flops_per_token(config, FLOP_ROWS) == pytest.approx(counted, rel=0.02)


def saved_activation_bytes(config: TXLConfig, rows: int) -> int:
    """Bytes of the tensors autograd saves in one training forward with full memory."""
    torch.manual_seed(0)
    model = TransformerXL(config).train()
    head = config.cutoffs[0] if config.cutoffs else config.n_token
    input_ids = torch.randint(0, config.n_token, (rows, config.tgt_len))
    # Real text's mix, as the estimate states it: the head, and a share in the widest tail.
    targets = torch.randint(0, head, (rows, config.tgt_len))
    start, end = max(cluster_bounds(config)[1:], key=lambda b: b[1] - b[0], default=(0, 1))
    tail = torch.rand(targets.shape) < TAIL_TARGET_SHARE
    targets = torch.where(tail, torch.randint(start, end, targets.shape), targets)
    mems = None
    for _ in range(-(-config.mem_len // config.tgt_len)):
        mems = model(input_ids, targets, mems).mems
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids, targets, mems)
    return sum(saved.values())


@pytest.mark.parametrize(
    "values",
    [
        dict(n_layer=2, n_head=8, d_model=256, d_head=32, d_inner=1024, tgt_len=64, mem_len=64,
             n_token=10_000, cutoffs=[2_000, 6_000], div_val=2, dropatt=0.1),
        dict(n_layer=2, n_head=4, d_model=128, d_head=32, d_inner=512, tgt_len=32, mem_len=128,
             n_token=30_000, cutoffs=[5_000]),
    ],
)  # fmt: skip
def test_activation_estimate_is_within_a_quarter_of_the_saved_tensors(values):
    config = TXLConfig(**values)
    per_row = (saved_activation_bytes(config, 3) - saved_activation_bytes(config, 1)) / 2
    memory = config.n_layer * config.mem_len * config.d_model * 4  # carried, not saved
    estimate = activation_bytes_per_row(config, dtype_bytes=4) - memory
    assert estimate == pytest.approx(per_row, rel=0.25)


def test_rank_memory_is_txl_inspects_states_plus_activations():
    report = inspect_config(str(REPO_ROOT / "configs" / "large.json"), world_size=4)
    model = shipped_model("large.json")
    expected = report.zero_bytes_per_rank[3] + report.activation_bytes_per_row * 16  # micro 16
    assert rank_memory_bytes(model, 3, 4, 16) == pytest.approx(expected)
