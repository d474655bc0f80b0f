"""txl-inspect: a model's size, compute and ZeRO memory, without allocating it.

    txl-inspect --config configs/large.json [--world-size 8] [--json]

The model is built on the meta device, so even the 0.8B lm1b model costs no memory.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

from txl_dist.cli import interruptible
from txl_dist.config.loading import load_run_config
from txl_dist.config.plan import PRECISION_BYTES
from txl_dist.config.sections import RunConfig
from txl_dist.model.accounting import (
    TAIL_TARGET_SHARE,
    ZERO_STAGES,
    activation_bytes_per_row,
    build_on_meta,
    count_parameters,
    forward_flops_per_token,
    snapshot_bytes,
    train_flops_per_token,
)
from txl_dist.schema import ConfigError


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
    micro_rows: int
    """Rows of one forward at this world size (1 where the global batch does not split over it)."""
    forward_flops_per_token: float
    """Forward FLOPs per training token at micro_rows (matmuls and attention; softmax head
    cluster only)."""
    train_flops_per_token: float
    """Forward plus backward (3x forward)."""
    world_size: int
    """World size the ZeRO estimates are for."""
    zero_bytes_per_rank: dict[int, float]
    """ZeRO stage -> bytes of model states per rank (mixed-precision Adam)."""
    activation_bytes_per_row: float
    """Estimated training activations of one micro-batch row in the config's precision."""
    snapshot_bytes: tuple[float, float]
    """Host memory of an asynchronous save's snapshot at the config's ZeRO stage and this world
    size: (rank 0, each other rank)."""


def inspect_config(path: str, world_size: int, overrides: list[str] = ()) -> ModelReport:
    run_config = load_run_config(path, overrides)
    config = run_config.model
    total, embedding = count_parameters(build_on_meta(config))
    rows = _micro_rows(run_config, world_size)
    forward = forward_flops_per_token(config, rows)
    return ModelReport(
        config=path,
        parameters=total,
        embedding_parameters=embedding,
        non_embedding_parameters=total - embedding,
        micro_rows=rows,
        forward_flops_per_token=forward,
        train_flops_per_token=train_flops_per_token(config, rows),
        world_size=world_size,
        zero_bytes_per_rank={s: f(world_size) * total for s, f in ZERO_STAGES.items()},
        activation_bytes_per_row=activation_bytes_per_row(
            config, PRECISION_BYTES[run_config.ds.precision]
        ),
        snapshot_bytes=snapshot_bytes(
            config,
            total,
            run_config.zero_stage,
            world_size,
            run_config.train.global_rows,
            run_config.ds.precision != "fp32",
        ),
    )


def _micro_rows(run_config: RunConfig, world_size: int) -> int:
    """Rows of one forward; 1 (the dearest per token) where the batch does not split evenly."""
    try:
        return run_config.plan(world_size).micro_rows
    except ConfigError:
        return 1


def format_report(r: ModelReport) -> str:
    gib = 1024**3
    lines = [
        f"{r.config}",
        f"  parameters      {r.parameters / 1e6:10.1f}M  ({r.parameters:,})",
        f"    embedding     {r.embedding_parameters / 1e6:10.1f}M",
        f"    non-embedding {r.non_embedding_parameters / 1e6:10.1f}M",
        f"  FLOPs/token     {r.forward_flops_per_token / 1e9:10.3f}G forward, "
        f"{r.train_flops_per_token / 1e9:.3f}G train at micro batch {r.micro_rows}",
        f"  model states per rank at world size {r.world_size} (mixed-precision Adam):",
    ]
    lines += [f"    ZeRO-{s}  {b / gib:10.2f} GiB" for s, b in r.zero_bytes_per_rank.items()]
    lines.append(
        f"  activations per micro-batch row (estimate) {r.activation_bytes_per_row / gib:.2f} GiB"
        f" (softmax: {TAIL_TARGET_SHARE:.0%} of targets in the tail clusters, as in real text)"
    )
    first, others = r.snapshot_bytes
    lines.append(
        f"  async-save snapshot in host memory (config's ZeRO stage) {first / gib:.2f} GiB on "
        f"rank 0, {others / gib:.2f} GiB on each other rank"
    )
    return "\n".join(lines)


@interruptible("txl-inspect")
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="txl-inspect", description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", required=True, help="run config JSON file(s)")
    parser.add_argument("--world-size", type=int, default=8, help="ranks for the ZeRO estimate")
    parser.add_argument("--json", action="store_true", help="print one JSON object per config")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value, as in pretrain.py (e.g. --set model.n_token=32000)",
    )
    args = parser.parse_args(argv)
    if args.world_size < 1:
        parser.error("--world-size must be at least 1")
    for path in args.config:
        try:
            report = inspect_config(path, args.world_size, args.set)
        except ConfigError as err:
            parser.exit(2, f"txl-inspect: config error: {err}\n")
        print(json.dumps(asdict(report)) if args.json else format_report(report))


if __name__ == "__main__":
    main()
