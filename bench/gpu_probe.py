"""The alternatives the fast CUDA path's levers were chosen among, in one short GPU run.

    python bench/gpu_probe.py [--device cuda] [--out DIR]     (PROBE_SMOKE=1: tiny, on a CPU)

- attention at `large`'s shapes: today's path (position table + SDPA memory-efficient), the
  cuDNN backend with a bias that needs a gradient, FlexAttention reading the unshifted table
  (dropatt 0), our fused Triton kernel (dropatt 0), each against today's gradients, and
  FlashAttention without the position term over the segment alone (a floor, not exact).
- gemm: `wt103_base`'s unaligned widths against the zero-padded ones, and with only d_model
  unaligned.
Writes OUT/gpu_probe.json (OUT: --out, else $OUT, else runs/gpu_probe).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.gpu_check import time_steps  # noqa: E402
from txl_dist.model.attention import (  # noqa: E402
    attention_bias,
    position_bias,
    position_product,
)
from txl_dist.model.rel_attention_kernel import rel_attention  # noqa: E402

RESULTS: dict = {}
SMOKE = os.environ.get("PROBE_SMOKE") == "1"  # tiny shapes on a CPU, to check the script runs


def attention(device) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, q, m, d = (1, 2, 16, 16, 16) if SMOKE else (16, 16, 384, 384, 64)
    k = q + m
    scale = d**-0.5
    bf = dict(device=device, dtype=torch.float32 if SMOKE else torch.bfloat16)
    torch.manual_seed(0)
    leaves = [
        torch.randn(*s, **bf, requires_grad=True)
        for s in ((b, h, q, d), (b, h, k, d), (b, h, k, d), (h, d, k), (h, d), (h, d))
    ]
    mask = attention_bias(q, m, m, False, device).to(bf["dtype"])

    def today(backend, p=0.0):
        def run():
            qq, kk, vv, rk, u, v = leaves
            bias = position_bias(qq + v[:, None], rk, mask, scale)
            with sdpa_kernel([backend, *([SDPBackend.MATH] if SMOKE else [])]):
                out = F.scaled_dot_product_attention(
                    qq + u[:, None], kk, vv, attn_mask=bias, dropout_p=p, scale=scale
                )
            out.float().sum().backward()
            return out

        return run

    def flex():
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        block = create_block_mask(lambda b_, h_, i, j: j <= i + m, None, None, q, k, device=device)
        compiled = torch.compile(flex_attention)

        def run():
            qq, kk, vv, rk, u, v = leaves
            pos = torch.matmul((qq + v[:, None]) * scale, rk)  # [B,H,Q,K], slot p: distance K-1-p

            def score_mod(s, b_, h_, i, j):
                return s + pos[b_, h_, i, torch.clamp(j + q - 1 - i, max=k - 1)]

            out = compiled(
                qq + u[:, None], kk, vv, score_mod=score_mod, block_mask=block, scale=scale
            )
            out.float().sum().backward()
            return out

        return run

    def fused():
        def run():
            qq, kk, vv, rk, u, v = leaves
            table = position_product(qq + v[:, None], rk, scale)
            out = rel_attention(qq + u[:, None], kk, vv, table, mask, scale, 0.0)
            out.float().sum().backward()
            return out

        return run

    def flash_floor():
        def run():
            qq, kk, vv, rk, u, v = leaves
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                out = F.scaled_dot_product_attention(
                    qq[:, :, :, :], kk[:, :, -q:], vv[:, :, -q:], is_causal=True, scale=scale
                )
            out.float().sum().backward()
            return out

        return run

    def grads(run):
        for t in leaves:
            t.grad = None
        out = run()
        return out.detach().float(), [
            None if t.grad is None else t.grad.float().flatten() for t in leaves
        ]

    ref_out, ref_grads = grads(today(SDPBackend.EFFICIENT_ATTENTION))
    cases = {
        "mem-eff (today), dropatt 0": today(SDPBackend.EFFICIENT_ATTENTION),
        "mem-eff (today), dropatt 0.2": today(SDPBackend.EFFICIENT_ATTENTION, p=0.2),
        "cudnn, bias with grad": today(SDPBackend.CUDNN_ATTENTION),
        "cudnn, bias with grad, dropatt 0.2": today(SDPBackend.CUDNN_ATTENTION, p=0.2),
        "flex, clamped unshifted table": flex(),
        "triton fused kernel (ours), dropatt 0": fused(),
        "flash, causal Q x Q only (a floor, not exact)": flash_floor(),
    }
    for label, run in cases.items():
        try:
            out, g = grads(run)
            exact = "floor" not in label and "0.2" not in label
            cos = (
                [
                    F.cosine_similarity(a, b_, dim=0).item()
                    for a, b_ in zip(g, ref_grads)
                    if a is not None
                ]
                if exact
                else []
            )
            ms = 1e3 * time_steps(run, device, warmup=1 if SMOKE else 3, steps=2 if SMOKE else 10)
            RESULTS[f"attention {label}"] = {
                "ms": ms,
                "out_max_abs": (out - ref_out).abs().max().item() if exact else None,
                "grad_cos_min": min(cos) if exact else None,
            }
        except Exception as err:  # noqa: BLE001 - a probe that fails says why
            RESULTS[f"attention {label}"] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
        print(label, RESULTS[f"attention {label}"], flush=True)


def gemm(device) -> None:
    bf = dict(device=device, dtype=torch.float32 if SMOKE else torch.bfloat16)
    for (m, kk, n), (m2, k2, n2) in (
        (((64, 41, 21), (64, 48, 24)),)
        if SMOKE
        else (
            ((4500, 410, 2100), (4500, 416, 2112)),
            ((4500, 2100, 410), (4500, 2112, 416)),
            ((9000, 410, 1230), (9000, 416, 1440)),
            ((4500, 410, 410), (4500, 416, 416)),
            # d_inner and heads aligned, d_model not: what padding d_model adds
            ((4500, 410, 2112), (4500, 2112, 410)),
            ((9000, 410, 1440), (4500, 480, 410)),
        )
    ):
        for shape in ((m, kk, n), (m2, k2, n2)):
            a, w = torch.randn(shape[0], shape[1], **bf), torch.randn(shape[2], shape[1], **bf)
            ms = 1e3 * time_steps(
                lambda a=a, w=w: F.linear(a, w),
                device,
                warmup=1 if SMOKE else 5,
                steps=2 if SMOKE else 50,
            )
            RESULTS[f"gemm {shape}"] = {
                "ms": ms,
                "tflops": 2 * shape[0] * shape[1] * shape[2] / ms / 1e9,
            }
            print(shape, RESULTS[f"gemm {shape}"], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--parts", default="gemm,attention", help="the probes to run")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs/gpu_probe")))
    args = parser.parse_args()
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    RESULTS["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    RESULTS["torch"] = torch.__version__
    RESULTS["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = {"gemm": gemm, "attention": attention}
    for part in (parts[name] for name in args.parts.split(",")):
        try:
            part(device)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        (args.out / "gpu_probe.json").write_text(json.dumps(RESULTS, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
