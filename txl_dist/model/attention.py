"""Relative multi-head attention of Transformer-XL (Dai et al. 2019, section 3.3), batch-first.

Shapes: B batch, Q query (segment) length, M memory length, K = M + Q key length, H heads,
D head size. The score of query i and key j is, with R the sinusoid of the distance i - j,

    (a) q_i . k_j  +  (b) q_i . W_R R_{i-j}  +  (c) u . k_j  +  (d) v . W_R R_{i-j}

(a)+(c) is one product of (q + u) with the keys, computed by `attend`; (b)+(d) is the scaled
(q + v) against the projected relative encodings, realigned by `rel_shift` and passed to `attend`
as the additive bias together with the causal / same-length mask (`attention_bias`): one pass
over [B, H, Q, K] after the product (`position_bias`). With model.fused_kernel, on a GPU,
`rel_attention_kernel` computes all four terms, softmax and values in one kernel per pass,
reading the unshifted product (`position_product`) by index (`attention_core` chooses).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from txl_dist.model.config import TXLConfig
from txl_dist.model.dropout import Dropout, dropout
from txl_dist.model.widths import SDPA_HEAD_MULTIPLE, layer_norm, pad_to, padded_width


def sinusoid_encoding(distances: Tensor, d_model: int) -> Tensor:
    """[K] float distances -> [K, d_model] encodings, sin half then cos half (as the reference)."""
    inv_freq = 1.0 / (
        10000
        ** (torch.arange(0, d_model, 2, device=distances.device, dtype=torch.float32) / d_model)
    )
    angles = distances.float()[:, None] * inv_freq[None, :]  # [K, d_model/2]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # [K, d_model]


def relative_distances(key_len: int, clamp_len: int, device: torch.device) -> Tensor:
    """Distances K-1 ... 0 for relative-encoding slots 0 ... K-1, clamped above at clamp_len."""
    distances = torch.arange(key_len - 1, -1, -1.0, device=device)
    return distances.clamp(max=clamp_len) if clamp_len > 0 else distances


def attention_mask(
    q_len: int, m_len: int, mem_len: int, same_length: bool, device: torch.device
) -> Tensor:
    """[Q, K] bool, True where query i (absolute position M+i) may attend to key j.

    Causal over [memory; segment]; with same_length each query also sees at most mem_len keys
    (itself included), so every prediction gets the same context length at evaluation.
    """
    query_pos = torch.arange(q_len, device=device)[:, None] + m_len  # [Q, 1]
    key_pos = torch.arange(m_len + q_len, device=device)[None, :]  # [1, K]
    allowed = key_pos <= query_pos  # [Q, K]
    if same_length:
        allowed &= key_pos > query_pos - mem_len
    return allowed


def attention_bias(
    q_len: int,
    m_len: int,
    mem_len: int,
    same_length: bool,
    device,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """[Q, K] additive mask in `dtype`: 0 where `attention_mask` allows, -inf elsewhere."""
    allowed = attention_mask(q_len, m_len, mem_len, same_length, device)
    return torch.zeros(allowed.shape, device=device, dtype=dtype).masked_fill(~allowed, -math.inf)


def padding_bias(key_padding: Tensor, dtype: torch.dtype) -> Tensor:
    """[B, 1, 1, K] additive bias of a left-padded batch: key_padding [B, K] True on padding.

    Half the dtype's lowest value rather than -inf: beside any real key its exp is exactly zero,
    and a padding query whose keys are all padding still gets a finite softmax (its output is
    never used) instead of NaNs that would reach the real rows through the layer norm.
    """
    bias = torch.zeros(key_padding.shape, dtype=dtype, device=key_padding.device)
    return bias.masked_fill(key_padding, torch.finfo(dtype).min / 2)[:, None, None, :]


# Where model.fused_kernel takes the fused kernel (rel_attention_kernel.py) instead of
# position_bias + attend: a GPU; elsewhere it would run in Triton's interpreter.
FUSED_DEVICES = {"cuda"}
# model.position_row_multiple's default: rows of the position product in 16-byte multiples
# (8 bf16 / fp16 values); at K + 1 columns cuBLAS falls back to its unaligned kernels, about a
# tenth of the aligned speed on an H100.
ROW_MULTIPLE = TXLConfig.position_row_multiple


def position_bias(
    query: Tensor, r_key: Tensor, mask: Tensor, scale: float, row_multiple: int = ROW_MULTIPLE
) -> Tensor:
    """Terms (b)+(d), scaled, realigned and masked: [B, H, Q, K] in query's dtype.

    query [B, H, Q, D] (already q + v), r_key [H, D, K], mask [Q, K] (attention_bias, in
    query's dtype): `position_product`, which `ShiftedBias` then realigns and masks in one pass
    over [B, H, Q, K].
    """
    return ShiftedBias.apply(position_product(query, r_key, scale, row_multiple), mask)


def position_product(
    query: Tensor, r_key: Tensor, scale: float, row_multiple: int = ROW_MULTIPLE
) -> Tensor:
    """Terms (b)+(d) before the shift: [H, B, Q, W], column 1 + p pairing query i with relative
    slot p (distance K-1-p), column 0 and the columns after K zero.

    One batched product per head with the batch folded into its rows ([H, B*Q, D] @ [H, D, W]):
    no copy of r_key per row, and its gradient is one product, not a sum over the batch. The
    zero slot in front of the keys is what the shift needs; the zero slots after them pad the
    rows to a multiple of `row_multiple` (model.position_row_multiple). The scale goes on the
    query ([B, H, Q, D], K/D times smaller than the scores).
    """
    b, h, q_len, d = query.shape
    k_len = r_key.size(-1)
    width = -(-(k_len + 1) // row_multiple) * row_multiple
    folded = (query * scale).transpose(0, 1).reshape(h, b * q_len, d)
    padded = torch.bmm(folded, F.pad(r_key, (1, width - k_len - 1)))  # [H, B*Q, W]
    return padded.view(h, b, q_len, width)


def rel_shift(padded: Tensor, k_len: int) -> Tensor:
    """Realign position scores: [..., Q, W] whose column 0 is zero, W > K -> [..., Q, K] with
    out[..., i, j] = padded[..., i, j + Q - i] for j <= i + M (a view, no copy).

    `padded[..., i, 1 + p]` pairs query i with relative slot p (distance K-1-p); after the shift,
    column j holds the slot of distance M + i - j. Entries above that diagonal are junk that the
    causal mask removes. Each block read flat from offset Q in rows of W - 1 is exactly that
    realignment (the classic pad-and-re-view trick, with W = K + 1 in the reference), so it is a
    strided view of `padded`; rows W - 1 >= K apart never overlap.
    """
    q_len, width = padded.shape[-2:]
    return padded.flatten(-2)[..., q_len:].unflatten(-1, (q_len, width - 1))[..., :k_len]


class ShiftedBias(torch.autograd.Function):
    """rel_shift of the [H, B, Q, W] position product plus the mask -> [B, H, Q, K], contiguous.

    Autograd's own backward of the shift's slices allocates a zeroed [H, B, Q, W] and copies the
    gradient into it (two passes); this one writes each element of the gradient once, the
    slots the shift never reads as zeros.
    """

    @staticmethod
    def forward(ctx, padded: Tensor, mask: Tensor) -> Tensor:
        h, b, q_len, _ = padded.shape
        k_len = mask.size(-1)
        ctx.shape = padded.shape
        shifted = rel_shift(padded, k_len).transpose(0, 1)
        if torch.compiler.is_compiling():
            # Inductor picks its own layouts; it mistakes the strides of an `out=` here and
            # fails to compile the reshape that follows (torch 2.13).
            return (shifted + mask).contiguous()
        return torch.add(shifted, mask, out=padded.new_empty(b, h, q_len, k_len))

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        h, b, q_len, width = ctx.shape
        k_len = grad.size(-1)
        flat = grad.new_empty(h, b, q_len * width)
        flat[..., :q_len].zero_()
        rows = flat[..., q_len:].view(h, b, q_len, width - 1)
        rows[..., :k_len].copy_(grad.transpose(0, 1))
        rows[..., k_len:].zero_()
        return flat.view(ctx.shape), None


def attend(
    query: Tensor, key: Tensor, value: Tensor, bias: Tensor, scale: float, dropatt: float
) -> Tensor:
    """softmax(query key^T * scale + bias) @ value -> [B, H, Q, D]; bias [B, H, Q, K] (with grad).

    scaled_dot_product_attention, except in float32 on CPU: there, for a bias that needs a
    gradient, it takes its math path, which adds passes over the [B, H, Q, K] scores for fully
    masked rows (ours have none). One baddbmm that adds the bias as it multiplies, then softmax
    and bmm, made the tiny config's fp32 training step 3% faster. In bf16 / fp16 the math path
    computes in float32 inside, more precisely than these ops would, so it stays.
    """
    if query.device.type != "cpu" or query.dtype != torch.float32:
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=bias, dropout_p=dropatt, scale=scale
        )
    b, h, q_len, d = query.shape
    k_len = key.size(2)
    scores = torch.baddbmm(
        bias.reshape(b * h, q_len, k_len),
        query.reshape(b * h, q_len, d),
        key.reshape(b * h, k_len, d).transpose(1, 2),
        alpha=scale,
    )  # [B*H, Q, K]
    probs = dropout(scores.softmax(dim=-1), dropatt)
    return torch.bmm(probs, value.reshape(b * h, k_len, -1)).view(b, h, q_len, -1)


def attention_core(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    r_key: Tensor,
    r_w_bias: Tensor,
    r_r_bias: Tensor,
    mask: Tensor,
    scale: float,
    dropatt: float,
    fused: bool = False,
    row_multiple: int = ROW_MULTIPLE,
) -> Tensor:
    """All four terms, softmax, dropout and values -> [B, H, Q, D]: query [B, H, Q, D], key and
    value [B, H, K, D], r_key [H, D, K], u and v [H, D], mask [Q, K] (attention_bias, in
    query's dtype; [B, 1, Q, K] with a padded batch's padding_bias). The fused kernel where
    `fused` (model.fused_kernel) on the FUSED_DEVICES for a mask shared by the rows, else
    position_bias, then attend with it; `row_multiple`: model.position_row_multiple.
    """
    if fused and query.device.type in FUSED_DEVICES and mask.dim() == 2:
        from txl_dist.model.rel_attention_kernel import rel_attention  # imports triton

        table = position_product(query + r_r_bias[:, None], r_key, scale, row_multiple)
        return rel_attention(query + r_w_bias[:, None], key, value, table, mask, scale, dropatt)
    # Terms (b)+(d): [B, H, Q, D] @ [H, D, K] -> [B, H, Q, K], realigned by distance, masked.
    bias = position_bias(query + r_r_bias[:, None], r_key, mask, scale, row_multiple)
    # Terms (a)+(c): softmax((q + u) k^T * scale + bias) @ v -> [B, H, Q, D]
    return attend(query + r_w_bias[:, None], key, value, bias.to(value.dtype), scale, dropatt)


class RelMultiHeadAttention(nn.Module):
    """Multi-head attention with relative positions over [memory; segment], plus residual and LN."""

    def __init__(self, config: TXLConfig):
        super().__init__()
        self.n_head, self.d_head = config.n_head, config.d_head
        self.pre_lnorm = config.pre_lnorm
        self.dropatt = config.dropatt
        self.fused, self.row_multiple = config.fused_kernel, config.position_row_multiple
        self.scale = config.d_head**-0.5
        inner = config.n_head * config.d_head
        # Names follow the reference code so its users recognise the state dict.
        self.qkv_net = nn.Linear(config.d_model, 3 * inner, bias=False)
        self.r_net = nn.Linear(config.d_model, inner, bias=False)
        self.o_net = nn.Linear(inner, config.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.drop = Dropout(config.dropout)

    def forward(
        self,
        h: Tensor,
        mem: Tensor,
        pos_enc: Tensor,
        r_w_bias: Tensor,
        r_r_bias: Tensor,
        mask: Tensor,
    ) -> Tensor:
        """h [B, Q, W], mem [B, M, d_model], pos_enc [K, W], mask [Q, K] (attention_bias); W
        is the residual stream's width, d_model or wider with zero columns (widths.py)."""
        b, q_len, width = h.shape
        context = torch.cat([pad_to(mem, width), h], dim=1)  # [B, K, W]
        if self.pre_lnorm:
            context = layer_norm(self.layer_norm, context)
        k_len = context.size(1)

        # Queries only for the segment: memory positions need keys and values, never queries.
        d_head = padded_width(self.d_head, SDPA_HEAD_MULTIPLE, h.device)
        inner = self.n_head * d_head
        w_qkv, w_r, w_o, r_w_bias, r_r_bias = self._weights(r_w_bias, r_r_bias, d_head, width)
        w_q, w_kv = w_qkv.split([inner, 2 * inner])
        query = F.linear(context[:, -q_len:], w_q)  # [B, Q, H*D]
        key, value = F.linear(context, w_kv).chunk(2, dim=-1)  # [B, K, H*D] each
        query, key, value = (
            t.view(b, -1, self.n_head, d_head).transpose(1, 2)  # [B, H, Q or K, D]
            for t in (query, key, value)
        )
        r_key = F.linear(pos_enc, w_r).view(k_len, self.n_head, d_head).permute(1, 2, 0)  # [H,D,K]

        dropatt = self.dropatt if self.training else 0.0
        attended = attention_core(
            query, key, value, r_key, r_w_bias, r_r_bias, mask.to(query.dtype), self.scale,
            dropatt, self.fused, self.row_multiple,
        )  # fmt: skip
        out = F.linear(attended.transpose(1, 2).reshape(b, q_len, inner), w_o)  # [B, Q, W]
        out = self.drop(out)
        return h + out if self.pre_lnorm else layer_norm(self.layer_norm, h + out)

    def _weights(
        self, r_w_bias: Tensor, r_r_bias: Tensor, d_head: int, width: int
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The q/k/v, r and output weights and u, v, each head zero-padded to d_head and the
        model dimension to the stream's width.

        Exact: zero query, key and position columns add nothing to the scores, zero value
        columns give zero output columns, and the output weight's zero columns drop them; the
        scale stays the real head size's. Zero input columns meet the stream's zero columns,
        and zero output rows keep them zero.
        """
        w_qkv, w_r, w_o, u, v = (
            self.qkv_net.weight, self.r_net.weight, self.o_net.weight, r_w_bias, r_r_bias
        )  # fmt: skip
        if d_head != self.d_head:
            heads = self.n_head

            def per_head_rows(w: Tensor) -> Tensor:  # [n * H * D, d] -> [n * H * d_head, d]
                return pad_to(w.view(-1, heads, self.d_head, w.size(-1)), d_head, 2).flatten(0, 2)

            w_qkv, w_r = per_head_rows(w_qkv), per_head_rows(w_r)
            w_o = pad_to(w_o.view(w_o.size(0), heads, self.d_head), d_head).flatten(1)
            u, v = pad_to(u, d_head), pad_to(v, d_head)
        return pad_to(w_qkv, width), pad_to(w_r, width), pad_to(w_o, width, 0), u, v
