"""txl-inspect: a model's size, compute and ZeRO memory, without allocating it.

    txl-inspect --config configs/large.json [--world-size 8] [--json]

The model is built on the meta device, so even the 0.8B lm1b model costs no memory.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import torch

from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.adaptive import cluster_dims

# Bytes of model states per parameter for mixed-precision Adam (ZeRO paper, section 3):
# fp16/bf16 weights 2 + gradients 2 + fp32 master weights, momentum and variance 12.
ZERO_STAGES = {
    0: lambda n: 16.0,
    1: lambda n: 4.0 + 12.0 / n,
    2: lambda n: 2.0 + 14.0 / n,
    3: lambda n: 16.0 / n,
}


@dataclass
class ModelReport:
    """What txl-inspect prints for one config."""

    config: str
    """Path of the run config."""
    parameters: int
    """Unique parameters (tied tensors counted once)."""
    embedding_parameters: int
    """Input embeddings, their projections and the untied output layers and projections."""
    non_embedding_parameters: int
    """Everything else: the layers and the shared attention biases."""
    forward_flops_per_token: float
    """Forward FLOPs per training token (matmuls and attention; softmax head cluster only)."""
    train_flops_per_token: float
    """Forward plus backward (3x forward)."""
    world_size: int
    """World size the ZeRO estimates are for."""
    zero_bytes_per_rank: dict[int, float]
    """ZeRO stage -> bytes of model states per rank (mixed-precision Adam)."""


def build_on_meta(config: TXLConfig) -> TransformerXL:
    with torch.device("meta"):
        return TransformerXL(config)


def count_parameters(model: TransformerXL) -> tuple[int, int]:
    """(total, embedding) unique parameter counts."""
    total = sum(p.numel() for p in model.parameters())
    embedding_modules = (model.word_emb, model.crit)
    seen: set[int] = set()
    embedding = 0
    for module in embedding_modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                embedding += p.numel()
    return total, embedding


def forward_flops_per_token(c: TXLConfig) -> float:
    """2 x multiply-adds per token of a training segment with full memory.

    Counts the query/key/value/output/position projections (keys, values and positions over
    the K = tgt_len + mem_len context, amortised over tgt_len queries), the three attention
    products over K keys, the feed-forward block, and the softmax head cluster with its
    projection. Tail clusters touch only rare tokens and are left out.
    """
    inner = c.n_head * c.d_head
    k_len = c.tgt_len + c.mem_len
    per_layer = (
        c.d_model * inner  # queries
        + 3 * c.d_model * inner * k_len / c.tgt_len  # keys, values, relative positions
        + inner * c.d_model  # output projection
        + 3 * k_len * inner  # (q+u)k, (q+v)r, attention x values
        + 2 * c.d_model * c.d_inner  # feed-forward
    )
    head_dim = cluster_dims(c)[0]
    head_size = (c.cutoffs[0] if c.cutoffs else c.n_token) + len(c.cutoffs)
    softmax = head_size * head_dim + (c.d_model * head_dim if c.d_model != head_dim else 0)
    return 2.0 * (c.n_layer * per_layer + softmax)


def inspect_config(path: str, world_size: int) -> ModelReport:
    with open(path) as f:
        run_config = json.load(f)
    config = TXLConfig.from_dict(run_config["model"])
    total, embedding = count_parameters(build_on_meta(config))
    forward = forward_flops_per_token(config)
    return ModelReport(
        config=path,
        parameters=total,
        embedding_parameters=embedding,
        non_embedding_parameters=total - embedding,
        forward_flops_per_token=forward,
        train_flops_per_token=3 * forward,
        world_size=world_size,
        zero_bytes_per_rank={s: f(world_size) * total for s, f in ZERO_STAGES.items()},
    )


def format_report(r: ModelReport) -> str:
    gib = 1024**3
    lines = [
        f"{r.config}",
        f"  parameters      {r.parameters / 1e6:10.1f}M  ({r.parameters:,})",
        f"    embedding     {r.embedding_parameters / 1e6:10.1f}M",
        f"    non-embedding {r.non_embedding_parameters / 1e6:10.1f}M",
        f"  FLOPs/token     {r.forward_flops_per_token / 1e9:10.3f}G forward, "
        f"{r.train_flops_per_token / 1e9:.3f}G train",
        f"  model states per rank at world size {r.world_size} (mixed-precision Adam):",
    ]
    lines += [f"    ZeRO-{s}  {b / gib:10.2f} GiB" for s, b in r.zero_bytes_per_rank.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="txl-inspect", description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", required=True, help="run config JSON file(s)")
    parser.add_argument("--world-size", type=int, default=8, help="ranks for the ZeRO estimate")
    parser.add_argument("--json", action="store_true", help="print one JSON object per config")
    args = parser.parse_args(argv)
    if args.world_size < 1:
        parser.error("--world-size must be at least 1")
    for path in args.config:
        report = inspect_config(path, args.world_size)
        print(json.dumps(asdict(report)) if args.json else format_report(report))


if __name__ == "__main__":
    main()
