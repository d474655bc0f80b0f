"""Evaluation speed, vanilla Transformer vs Transformer-XL: the paper's Table 9 on our model.

    python bench/eval_speed.py [--lengths 200 400 800 1600] [--threads 1] [--tokens 16]

One model, fixed random weights, no dropout, batch 1, fp32 (bench/train_step.py's config: 4
layers, d_model 256, vocab 10,000). For each attention length L:

- vanilla (Al-Rfou et al.): for every predicted token, run the model on the L tokens before it
  without memory and keep the last position's prediction; then shift by one and recompute.
  Only the last position goes through the softmax layer, as a vanilla evaluation needs.
- Transformer-XL: memory of L states, same_length (every query sees exactly L keys), segments of
  --segment tokens, each scored once and cached; also with segments of 1 token (token by token).

Prints the per-token time of each (median of repeats) and the vanilla / Transformer-XL ratio.
The paper reports 363x at L = 800 (and 1,874x at 3,800) on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor, nn
from train_step import CONFIG, time_steps

from txl_dist.model import TransformerXL


class LastPositionHead(nn.Module):
    """The model's softmax layer applied to the last position only (the only one vanilla uses)."""

    def __init__(self, crit: nn.Module):
        super().__init__()
        self.crit = crit

    def log_probs(self, hidden: Tensor) -> Tensor:
        # The other rows are a broadcast view of it: the model reshapes [B*Q, V], we read [0, -1].
        return self.crit.log_probs(hidden[-1:]).expand(hidden.size(0), -1)


def per_token(run: Callable[[], None], tokens: int, repeats: int) -> float:
    """Median seconds per token of `run`, which predicts `tokens` tokens, after one warm-up."""
    return time_steps(run, warmup=1, steps=repeats) / tokens


def vanilla(model: TransformerXL, stream: Tensor, L: int, n: int) -> Callable[[], None]:
    """Predict n tokens, each from a fresh run over the L tokens before it."""

    def run():
        for i in range(n):
            model(stream[None, i : i + L])

    return run


def transformer_xl(
    model: TransformerXL, stream: Tensor, L: int, segment: int, n: int
) -> Callable[[], None]:
    """Predict n tokens in segments, on a memory already holding the L tokens before them."""
    model.set_lengths(tgt_len=segment, mem_len=L, same_length=True)
    with torch.no_grad():
        warm = model(stream[None, :L]).mems

    def run():
        model.set_lengths(tgt_len=segment, mem_len=L, same_length=True)
        mems = warm
        for start in range(L, L + n, segment):
            mems = model(stream[None, start : start + segment], mems=mems).mems

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[200, 400, 800, 1600])
    # One thread by default: on a shared 2-core machine, 2-thread timings swing 40x with load.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=16, help="vanilla predictions per repeat")
    parser.add_argument("--segment", type=int, default=64, help="Transformer-XL segment length")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = dataclasses.replace(CONFIG, dropout=0.0)
    model = TransformerXL(config).eval()
    stream = torch.randint(0, config.n_token, (max(args.lengths) + 4 * args.segment,))
    print(
        f"{config.n_layer} layers, d_model {config.d_model}, vocab {config.n_token}, batch 1, "
        f"fp32, {args.threads} threads; Transformer-XL segment {args.segment}"
    )
    print(f"{'L':>6} {'vanilla ms/tok':>15} {'TXL ms/tok':>11} {'ratio':>8} "
          f"{'TXL 1-tok ms/tok':>17} {'ratio':>8}")  # fmt: skip
    with torch.no_grad():
        for L in args.lengths:
            model.set_lengths(mem_len=0, same_length=False)
            model.crit, crit = LastPositionHead(model.crit), model.crit
            slow = per_token(vanilla(model, stream, L, args.tokens), args.tokens, args.repeats)
            model.crit = crit
            n = 4 * args.segment
            fast = per_token(transformer_xl(model, stream, L, args.segment, n), n, args.repeats)
            step = per_token(transformer_xl(model, stream, L, 1, 64), 64, args.repeats)
            print(
                f"{L:>6} {1e3 * slow:>15.2f} {1e3 * fast:>11.3f} {slow / fast:>7.0f}x "
                f"{1e3 * step:>17.3f} {slow / step:>7.0f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
