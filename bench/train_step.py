"""Forward+backward throughput of one Transformer-XL training step (fp32, CPU threads).

    python bench/train_step.py [--threads 2] [--reference PATH/transformer-xl/pytorch]
                               [--compile] [--config configs/tiny.json]

The config is the foundation issue's: 4 layers, d_model 256, 8 heads x 32, d_inner 1024,
tgt_len = mem_len = 128, batch 8, vocab 10,000, full softmax, dropout 0.1; or with --config the
model section of a run config (n_token "auto" taken as 32,000) and its train.global_rows as the
batch. Prints tokens/s, the median of 10 steps after 3 warm-up steps, each step continuing the
previous one's memory; the runs take turns step by step. Token ids are uniform, so with cutoffs
most targets fall in the last cluster (real text puts most in the head): the adaptive softmax
costs more here than in training. With --reference, the reference MemTransformerLM, built with
the same layout and our weights, is timed the same way in the same run; with --compile, a copy
of our model with each decoder layer torch.compiled as `train.compile` does (compile time
excluded: it happens in the warm-up).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch

from txl_dist.engine.build import compile_layers
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


def time_steps(runs: dict, warmup: int, steps: int) -> dict[str, float]:
    """Median seconds per step of each run: `warmup` calls each, then `steps` rounds of one
    call each, interleaved so that a change in the machine's load falls on every run alike."""
    for step in runs.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(steps):
        for name, step in runs.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def ours_step(model: TransformerXL, tokens: torch.Tensor):
    state = {"mems": None}

    def step():
        out = model(tokens[:, :-1], tokens[:, 1:], state["mems"])
        out.loss.mean().backward()
        state["mems"] = out.mems
        model.zero_grad(set_to_none=True)

    return step


def model_and_batch(config_path: str | None) -> tuple[TXLConfig, int]:
    if config_path is None:
        return CONFIG, BATCH
    with open(config_path) as f:
        run = json.load(f)
    model = dict(run["model"])
    if model["n_token"] == "auto":  # from the data, which this benchmark does not read
        model["n_token"] = 32_000
    return TXLConfig.from_dict(model), run["train"]["global_rows"]


def reference_step(ours: TransformerXL, tokens: torch.Tensor, path: str):
    """The reference model with our weights (same state-dict names); its tensors are time-major."""
    sys.path[:0] = [path, f"{path}/utils"]
    from mem_transformer import MemTransformerLM

    c = ours.config
    model = MemTransformerLM(
        c.n_token,
        c.n_layer,
        c.n_head,
        c.d_model,
        c.d_head,
        c.d_inner,
        c.dropout,
        c.dropatt,
        tie_weight=c.tie_weight,
        d_embed=c.d_embed,
        div_val=c.div_val,
        tie_projs=c.tie_projs or [False],
        pre_lnorm=c.pre_lnorm,
        tgt_len=c.tgt_len,
        ext_len=0,
        mem_len=c.mem_len,
        cutoffs=c.cutoffs,
        attn_type=0,
    ).to(tokens.device)  # its legacy torch.Tensor(...) parameters ignore a default device
    model.load_state_dict(ours.state_dict(), strict=False)  # all but its inv_freq buffer
    model.crit.keep_order = True  # NLL per token in input order, not grouped by cluster
    data, target = tokens[:, :-1].t().contiguous(), tokens[:, 1:].t().contiguous()
    with torch.no_grad():
        diff = model.eval()(data, target)[0].t() - ours.eval()(tokens[:, :-1], tokens[:, 1:]).loss
    print(f"same weights, no dropout: max |NLL difference| = {diff.abs().max().item():.2e}")
    model.crit.keep_order = False  # timed as its train.py runs it
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
    parser.add_argument("--compile", action="store_true", help="also time train.compile's model")
    parser.add_argument("--config", help="a run config whose model to time instead")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config, batch = model_and_batch(args.config)
    tokens = torch.randint(0, config.n_token, (batch, config.tgt_len + 1))
    tokens_per_step = batch * config.tgt_len

    model = TransformerXL(config).train()
    runs = {"txl-dist": ours_step(model, tokens)}
    if args.compile:
        compiled = copy.deepcopy(model)
        compile_layers(compiled)
        runs["compiled"] = ours_step(compiled, tokens)
    if args.reference:
        runs["reference"] = reference_step(model, tokens, args.reference)
    rates = {}
    for name, seconds in time_steps(runs, args.warmup, args.steps).items():
        rates[name] = tokens_per_step / seconds
        print(f"{name:>10}: {rates[name]:8.0f} tokens/s  ({seconds * 1000:.1f} ms/step)")
    if "compiled" in rates:
        print(f"   compile speed-up: {rates['compiled'] / rates['txl-dist']:.2f}x")
    if "reference" in rates:
        print(f"   speedup: {rates['txl-dist'] / rates['reference']:.2f}x")


if __name__ == "__main__":
    main()
