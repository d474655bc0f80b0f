"""txl-eval's sweep mode (--sweep-mem-len, --sweep-clamp-len): its arguments and its run, one
or several exports scored over the split read once (txl_dist.evaluation.sweep)."""

from __future__ import annotations

import argparse

import torch

from txl_dist.cli.evaluate_data import batches_for, load_model
from txl_dist.evaluation.context import RECL_THRESHOLD
from txl_dist.evaluation.sweep import SweepResult, run_sweep
from txl_dist.model import TransformerXL
from txl_dist.process.dist import World

SWEEP_HELP = """\
sweeps:
  --sweep-mem-len 0,32,64,128 scores the split at each memory length (the other lengths as
  above); --sweep-clamp-len=-1,16,... does the same for clamp_len (-1: no clamp; write it with
  "=" as it starts with a dash). The data is read once.
  Output: a table (--json: rows of mem_len, clamp_len, attn_len, loss, ppl or bpc, tokens),
  --out CSV.
  attn_len is the most tokens a prediction is conditioned on: mem_len with same_length,
  mem_len + tgt_len without. The swept context is attn_len for a memory sweep and clamp_len
  (-1 counting as attn_len) for a clamp sweep. With same_length, a memory sweep's mem_len 0
  row (marked "*", segment_alone in --json and --out) is the segment alone: causal, no
  memory, same_length off, at context 0; the other rows stay same-length.

  effective context (each model): the shortest swept context whose loss is at most
  (1 + --threshold) times the loss at the longest swept context.

  RECL (several --model, a group): Dai et al. 2019's relative effective context length
  (section 4.3, appendix C). With b(c, t) the smallest loss any model of the group has on token
  t at context c, and T the fraction r of tokens with the largest b(c, t), a model's relative
  loss is f(c, c') = mean over T of min(b(c, t), loss(c', t)) and its gain
  g(c, c') = 1 - exp(f(c, c') - f(c, c)). Starting at the shortest context c and taking c' as
  the next swept one, RECL is the first c with g(c, c') < --threshold (">=" when the gain
  never fell below it). Sweep evenly spaced contexts, as the paper steps c by a fixed delta.
  Every model must score the same tokens: same --tgt-len and contexts (same_length).
"""


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    """The sweep's arguments: the swept lengths, the threshold, RECL's fractions, --out."""
    sweep = p.add_mutually_exclusive_group()
    sweep.add_argument("--sweep-mem-len", type=_lengths, metavar="L1,L2,...", help="sweep mem_len")
    sweep.add_argument(
        "--sweep-clamp-len", type=_lengths, metavar="L1,L2,...", help="sweep clamp_len"
    )
    p.add_argument(
        "--threshold", type=float, default=RECL_THRESHOLD,
        help="sweep: effective-context and RECL threshold (default 0.01)",
    )  # fmt: skip
    p.add_argument(
        "--recl-r", type=_fractions, default=[0.1, 0.5, 1.0], metavar="R1,R2,...",
        help="sweep of several models: RECL's fractions of hardest tokens (default 0.1,0.5,1.0)",
    )  # fmt: skip
    p.add_argument("--out", help="sweep: also write the rows to this CSV file")


def check_sweep_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """args.lengths and args.sweep (mem_len, clamp_len or None) set; what needs a sweep refused
    without one."""
    args.lengths = args.sweep_mem_len or args.sweep_clamp_len
    args.sweep = "mem_len" if args.sweep_mem_len else "clamp_len" if args.lengths else None
    if args.sweep is None and (len(args.model) > 1 or args.out):
        p.error("several --model and --out need a sweep: add --sweep-mem-len or --sweep-clamp-len")
    if not 0 < args.threshold < 1:
        p.error(f"--threshold must be in (0, 1), got {args.threshold}")


def _lengths(text: str) -> list[int]:
    try:
        lengths = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        lengths = []
    if not lengths or lengths[0] < -1:
        raise argparse.ArgumentTypeError(
            f"need comma-separated lengths >= 0 (clamp: -1 for none), got {text!r}"
        )
    return lengths


def _fractions(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"need fractions in (0, 1], got {text!r}")
    return values


def sweep(args: argparse.Namespace, world: World, device: torch.device) -> SweepResult:
    first = load_model(args.model[0], args, device)
    _, batches, _, level = batches_for(args, first, world)  # segments of the first model's tgt_len
    loaded = {args.model[0]: first}  # the others are loaded one at a time, in their turn

    def load(path: str) -> TransformerXL:
        return loaded.pop(path) if path in loaded else load_model(path, args, device)

    return run_sweep(
        load, args.model, batches, device, args.sweep, args.lengths, args.threshold,
        args.recl_r, progress=world.is_main and not args.no_progress, level=level,
    )  # fmt: skip
