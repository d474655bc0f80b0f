"""Widths zero-padded inside the weights at use, so the GPU's kernels see aligned shapes.

SDPA's memory-efficient kernel (the fused one that takes a bias with a gradient) needs a head
size that is a multiple of 8, else it takes its math path: heads are padded to
SDPA_HEAD_MULTIPLE. Rows of bf16 in 16-byte multiples take cuBLAS's aligned kernels, about twice
as fast as the unaligned ones at wt103_base's 410 / 2100 (docs/gpus.md): model.width_multiple
8 pads d_model (the residual stream) and d_inner too; 1, the default until a step measures
faster, leaves them as configured.

Padding is exact: zero rows of a weight give zero columns, zero columns drop them, the layer
norms normalise the real columns only, and the padding is never a parameter, so the state dict
keeps the paper's shapes and the padding gets no gradient. Only the PADDED_DEVICES pad: a CPU
gains nothing from extra columns.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SDPA_HEAD_MULTIPLE = 8
PADDED_DEVICES = {"cuda"}


def padded_width(width: int, multiple: int, device: torch.device) -> int:
    """`width` rounded up to `multiple` on the PADDED_DEVICES, unchanged elsewhere."""
    if device.type not in PADDED_DEVICES:
        return width
    return -(-width // multiple) * multiple


def pad_to(x: Tensor, width: int, dim: int = -1) -> Tensor:
    """x with zeros appended along `dim` up to `width` (x itself when it is that wide)."""
    extra = width - x.size(dim)
    if not extra:
        return x
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, extra]
    return F.pad(x, pad)


def layer_norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    """`norm` over x's real columns (its normalized_shape); the padding columns stay zero."""
    real = norm.normalized_shape[0]
    if x.size(-1) == real:
        return norm(x)
    return pad_to(norm(x[..., :real]), x.size(-1))
