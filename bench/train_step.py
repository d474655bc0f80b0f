"""Forward+backward throughput of one Transformer-XL training step (fp32, CPU threads).

    python bench/train_step.py [--threads 2] [--reference PATH/transformer-xl/pytorch]

The config is the foundation issue's: 4 layers, d_model 256, 8 heads x 32, d_inner 1024,
tgt_len = mem_len = 128, batch 8, vocab 10,000, full softmax, dropout 0.1. Prints tokens/s, the
median of 10 steps after 3 warm-up steps, each step continuing the previous one's memory.
With --reference, the reference MemTransformerLM is timed the same way in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from txl_dist.model import TransformerXL, TXLConfig

CONFIG = TXLConfig(
    n_token=10_000,
    n_layer=4,
    n_head=8,
    d_model=256,
    d_head=32,
    d_inner=1024,
    dropout=0.1,
    tgt_len=128,
    mem_len=128,
)
BATCH = 8


def time_steps(step, warmup: int, steps: int) -> float:
    """Median seconds of `steps` calls of step() after `warmup` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ours_step(model: TransformerXL, tokens: torch.Tensor):
    state = {"mems": None}

    def step():
        out = model(tokens[:, :-1], tokens[:, 1:], state["mems"])
        out.loss.mean().backward()
        state["mems"] = out.mems
        model.zero_grad(set_to_none=True)

    return step


def reference_step(ours: TransformerXL, tokens: torch.Tensor, path: str):
    """The reference model with our weights (same state-dict names); its tensors are time-major."""
    sys.path[:0] = [path, f"{path}/utils"]
    from mem_transformer import MemTransformerLM

    c = CONFIG
    model = MemTransformerLM(
        c.n_token,
        c.n_layer,
        c.n_head,
        c.d_model,
        c.d_head,
        c.d_inner,
        c.dropout,
        c.dropatt,
        tie_weight=True,
        d_embed=c.d_model,
        div_val=1,
        tie_projs=[False],
        pre_lnorm=False,
        tgt_len=c.tgt_len,
        ext_len=0,
        mem_len=c.mem_len,
        cutoffs=[],
        attn_type=0,
    ).train()
    model.load_state_dict(ours.state_dict(), strict=False)  # all but its inv_freq buffer
    data, target = tokens[:, :-1].t().contiguous(), tokens[:, 1:].t().contiguous()
    with torch.no_grad():
        diff = model.eval()(data, target)[0].t() - ours.eval()(tokens[:, :-1], tokens[:, 1:]).loss
    print(f"same weights, no dropout: max |NLL difference| = {diff.abs().max().item():.2e}")
    model.train(), ours.train()
    state = {"mems": ()}

    def step():
        loss, *mems = model(data, target, *state["mems"])
        loss.float().mean().backward()
        state["mems"] = tuple(mems)
        model.zero_grad(set_to_none=True)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--reference", help="path to the reference code's pytorch/ folder")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokens = torch.randint(0, CONFIG.n_token, (BATCH, CONFIG.tgt_len + 1))
    tokens_per_step = BATCH * CONFIG.tgt_len

    model = TransformerXL(CONFIG).train()
    runs = {"txl-dist": ours_step(model, tokens)}
    if args.reference:
        runs["reference"] = reference_step(model, tokens, args.reference)
    rates = {}
    for name, step in runs.items():
        seconds = time_steps(step, args.warmup, args.steps)
        rates[name] = tokens_per_step / seconds
        print(f"{name:>10}: {rates[name]:8.0f} tokens/s  ({seconds * 1000:.1f} ms/step)")
    if "reference" in rates:
        print(f"   speedup: {rates['txl-dist'] / rates['reference']:.2f}x")


if __name__ == "__main__":
    main()
