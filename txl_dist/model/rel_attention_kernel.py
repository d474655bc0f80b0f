"""Transformer-XL's attention core as one fused Triton kernel per pass (FlashAttention-2 style).

    out = softmax(scale (q + u) k^T + P_shifted + mask) @ v       [B, H, Q, D]

with P the scaled position scores `attention.position_product` returns ([H, B, Q, W], terms
(b)+(d) before the shift) and mask `attention_bias`'s [Q, K]: what `position_bias` + `attend`
compute, without the [B, H, Q, K] bias, scores or probabilities ever in memory, forward or
backward. The model config's `fused_kernel` switches it on.

- Position scores by index: query i and key j read the unshifted table at column j + Q - i
  (slot j + Q-1-i, after the table's leading zero column), consecutive keys at consecutive
  columns, so the shift costs nothing. The table is one aligned matrix product outside the
  kernel. Computing it per tile from R would save its round trip to memory but cost about as
  many FLOPs again as the scores, a skewed gather within registers and a reduction of dR across
  query blocks (atomics or partial sums).
- Causal block skipping: key j is visible to query i only if j <= i + M, so a query block stops
  at its last row's diagonal and a key block starts at the first query that sees it. Past the
  diagonal the mask is never read: it must be causal at least, as attention_bias's always is;
  same_length's lower bound comes from the mask.
- Online softmax in float32 (base 2), the log-sum-exp kept per row for the backward.
- Dropout on the probabilities in the kernel: element (b, h, i, j) is kept where Philox at
  (seed, its flat index) draws at least dropatt. The seed is a device tensor drawn from torch's
  generator: reproducible under torch.manual_seed, fresh on every CUDA-graph replay, and the
  backward regenerates the forward's mask from it.
- A deterministic backward without atomics: one program per key block sums dK and dV over its
  query blocks, one per query block sums dQ over its key blocks and writes each dP element once
  (column j + Q - i is a bijection of j within a row); slots no query reads stay zero. autograd
  carries dP on into R, u, v and the query.

Dot products run in IEEE precision for float32 inputs (no TF32, as torch's own default), on
tensor cores for bf16 / fp16. Tests run it on CPU in Triton's interpreter (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # the model needs no triton; only this kernel does
    triton = tl = None

# Tiles of BLOCK_M queries x BLOCK_N keys, NUM_WARPS warps a program: the largest that compile
# for a Hopper GPU without spilling registers in bf16 with dropout (ptxas's report; 64 x 64
# spills in both backward kernels). Not timed yet: a GPU measurement chooses (docs/gpus.md).
BLOCK_M = 64
BLOCK_N = 32
NUM_WARPS = 8


def _jit(fn):
    """triton.jit, or the plain function where triton is absent (`rel_attention` refuses)."""
    return fn if triton is None else triton.jit(fn)


def rel_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    table: Tensor,
    mask: Tensor,
    scale: float,
    dropatt: float,
) -> Tensor:
    """softmax(query key^T * scale + table shifted + mask) (dropped out) @ value -> [B, H, Q, D].

    query [B, H, Q, D] (q + u), key and value [B, H, K, D], table [H, B, Q, W]
    (`position_product` of q + v: column 1 + p pairs query i with slot p), mask [Q, K]
    (`attention_bias`, causal). Computed in value's dtype; gradients for all but the mask.
    """
    if triton is None:
        raise RuntimeError("the fused attention kernel needs triton: pip install triton")
    query, key, value, mask = (
        _rows_contiguous(t.to(value.dtype)) for t in (query, key, value, mask)
    )
    # d_table is written with the table's strides: a contiguous table has a like gradient.
    table = table.to(value.dtype).contiguous()
    return RelAttention.apply(query, key, value, table, mask, scale, dropatt)


class RelAttention(torch.autograd.Function):
    """The kernels' forward and backward; see the module's docstring."""

    @staticmethod
    def forward(ctx, query, key, value, table, mask, scale, dropatt):
        b, h, q_len, _ = query.shape
        out = query.new_empty(query.shape)
        lse = query.new_empty(b, h, q_len, dtype=torch.float32)  # log2-sum-exp of each row
        seed = (
            torch.randint(2**62, (1,), device=query.device)
            if dropatt
            else query.new_zeros(1, dtype=torch.int64)
        )
        _forward[(triton.cdiv(q_len, BLOCK_M), b * h)](
            *_common(query, key, value, table, mask, seed, scale, dropatt),
            *_rows(out), out, lse, **_meta(query, dropatt),
        )  # fmt: skip
        ctx.save_for_backward(query, key, value, table, mask, seed, out, lse)
        ctx.scale, ctx.dropatt = scale, dropatt
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        query, key, value, table, mask, seed, out, lse = ctx.saved_tensors
        grad = _rows_contiguous(grad)
        b, h, q_len, _ = query.shape
        k_len = key.size(2)
        common = _common(query, key, value, table, mask, seed, ctx.scale, ctx.dropatt)
        meta = _meta(query, ctx.dropatt)
        delta = (out.float() * grad.float()).sum(-1)  # [B, H, Q]: rowsum(dO * O) = rowsum(dP * P)
        d_query, d_key, d_value = (t.new_empty(t.shape) for t in (query, key, value))
        d_table = torch.zeros_like(table)  # slots no query reads keep a zero gradient
        _backward_key_value[(triton.cdiv(k_len, BLOCK_N), b * h)](
            *common, *_rows(grad), grad, lse, delta, *_rows(d_key), d_key, d_value, **meta,
        )  # fmt: skip
        _backward_query[(triton.cdiv(q_len, BLOCK_M), b * h)](
            *common, *_rows(grad), grad, lse, delta, *_rows(d_query), d_query, d_table, **meta,
        )  # fmt: skip
        return d_query, d_key, d_value, d_table, None, None, None


def _rows_contiguous(t: Tensor) -> Tensor:
    """t, or a contiguous copy where its last dimension is strided: the kernels read rows as
    vectors, whatever the other strides (transposed heads, an expanded batch)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _rows(t: Tensor) -> tuple[int, int, int]:
    """Strides of batch, head and row of a [B, H, N, D] tensor."""
    return t.stride(0), t.stride(1), t.stride(2)


def _common(query, key, value, table, mask, seed, scale, dropatt) -> tuple:
    """The arguments every kernel starts with: inputs, their strides, lengths and scalars."""
    b, h, q_len, d = query.shape
    return (
        query, key, value, table, mask, seed,
        *_rows(query), *_rows(key), *_rows(value),
        table.stride(0), table.stride(1), table.stride(2), mask.stride(0),
        h, q_len, key.size(2), d, scale, dropatt,
    )  # fmt: skip


def _meta(query: Tensor, dropatt: float) -> dict:
    """Compile-time arguments: the tiles, the head's block (a power of two >= 16, as tl.dot
    needs), whether to drop out, and the products' precision: IEEE for float32 (torch's
    default: no TF32)."""
    return dict(
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        num_warps=NUM_WARPS,
        BLOCK_D=max(16, triton.next_power_of_2(query.size(-1))),
        DROPOUT=dropatt > 0,
        DOT="ieee" if query.dtype == torch.float32 else "tf32",
    )


# The kernels' arguments, in the order `_common` gives them, then each kernel's own:
#   Qu, K, V, Table, Mask, Seed: q + u, keys, values, position table, mask, dropout seed
#   s{q,k,v}{b,h,n}: strides of batch, head and row; st{h,b,q}: the table's; smq: the mask's
#   H, Q_LEN, K_LEN, D: heads, queries, keys, head size; scale, p_drop: scalars


@_jit
def _forward(
    Qu, K, V, Table, Mask, Seed,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sth, stb, stq, smq,
    H, Q_LEN, K_LEN, D, scale, p_drop,
    sob, soh, son, Out, Lse,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DROPOUT: tl.constexpr,
    DOT: tl.constexpr,
):  # fmt: skip
    """One query block of one (batch, head): out and the log2-sum-exp of its rows."""
    block, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = _load_rows(Qu + b * sqb + h * sqh, sqn, rows, Q_LEN, dims, D)
    table = Table + h * sth + b * stb + rows[:, None] * stq
    seed = tl.load(Seed)
    row_max = tl.full([BLOCK_M], -float("inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, _key_end(block, BLOCK_M, Q_LEN, K_LEN), BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k = _load_rows(K + b * skb + h * skh, skn, cols, K_LEN, dims, D)
        v = _load_rows(V + b * svb + h * svh, svn, cols, K_LEN, dims, D)
        s = _scores(q, k, table, Mask, smq, rows, cols, Q_LEN, K_LEN, scale, DOT)
        new_max = tl.maximum(row_max, tl.max(s, 1))
        # A row with no visible key yet (same_length's first blocks, rows past Q) stays at
        # -inf: subtract 0 there, not -inf, or exp2 gives NaN instead of 0.
        shift = tl.where(new_max == -float("inf"), 0.0, new_max)
        p = tl.exp2(s - shift[:, None])
        rescale = tl.exp2(row_max - shift)
        row_sum = row_sum * rescale + tl.sum(p, 1)
        if DROPOUT:
            p = _dropped(p, _kept(seed, bh, rows, cols, Q_LEN, K_LEN, p_drop), p_drop)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT)
        row_max = new_max
    row_sum = tl.where(row_sum == 0, 1.0, row_sum)  # rows past Q only: every real row sees itself
    _store_rows(Out + b * sob + h * soh, son, rows, Q_LEN, dims, D, acc / row_sum[:, None])
    tl.store(Lse + bh * Q_LEN + rows, row_max + tl.log2(row_sum), mask=rows < Q_LEN)


@_jit
def _backward_key_value(
    Qu, K, V, Table, Mask, Seed,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sth, stb, stq, smq,
    H, Q_LEN, K_LEN, D, scale, p_drop,
    sgb, sgh, sgn, Grad, Lse, Delta, sdb, sdh, sdn, DK, DV,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DROPOUT: tl.constexpr,
    DOT: tl.constexpr,
):  # fmt: skip
    """One key block of one (batch, head): dK and dV, summed over the queries that see it.
    dK and dV share strides (both new, in key's shape)."""
    block, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    k = _load_rows(K + b * skb + h * skh, skn, cols, K_LEN, dims, D)
    v = _load_rows(V + b * svb + h * svh, svn, cols, K_LEN, dims, D)
    seed = tl.load(Seed)
    d_key = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    d_value = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    # The first query that sees key j is j - M; start at its block.
    first = tl.maximum(block * BLOCK_N - (K_LEN - Q_LEN), 0) // BLOCK_M * BLOCK_M
    for start in range(first, Q_LEN, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        q = _load_rows(Qu + b * sqb + h * sqh, sqn, rows, Q_LEN, dims, D)
        grad = _load_rows(Grad + b * sgb + h * sgh, sgn, rows, Q_LEN, dims, D)
        table = Table + h * sth + b * stb + rows[:, None] * stq
        p, d_scores = _tile_grads(
            q, k, v, grad, table, Mask, smq, Lse, Delta, seed, bh, rows, cols,
            Q_LEN, K_LEN, scale, p_drop, DROPOUT, DOT,
        )  # fmt: skip
        d_value += tl.dot(tl.trans(p.to(grad.dtype)), grad, input_precision=DOT)
        d_key += tl.dot(tl.trans(d_scores.to(q.dtype)), q, input_precision=DOT)
    _store_rows(DK + b * sdb + h * sdh, sdn, cols, K_LEN, dims, D, d_key * scale)
    _store_rows(DV + b * sdb + h * sdh, sdn, cols, K_LEN, dims, D, d_value)


@_jit
def _backward_query(
    Qu, K, V, Table, Mask, Seed,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sth, stb, stq, smq,
    H, Q_LEN, K_LEN, D, scale, p_drop,
    sgb, sgh, sgn, Grad, Lse, Delta, sdb, sdh, sdn, DQ, DTable,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DROPOUT: tl.constexpr,
    DOT: tl.constexpr,
):  # fmt: skip
    """One query block of one (batch, head): dQ, and dP written into d_table (the table's
    strides) at the columns the forward read."""
    block, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = _load_rows(Qu + b * sqb + h * sqh, sqn, rows, Q_LEN, dims, D)
    grad = _load_rows(Grad + b * sgb + h * sgh, sgn, rows, Q_LEN, dims, D)
    table_rows = h * sth + b * stb + rows[:, None] * stq
    seed = tl.load(Seed)
    d_query = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, _key_end(block, BLOCK_M, Q_LEN, K_LEN), BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k = _load_rows(K + b * skb + h * skh, skn, cols, K_LEN, dims, D)
        v = _load_rows(V + b * svb + h * svh, svn, cols, K_LEN, dims, D)
        _, d_scores = _tile_grads(
            q, k, v, grad, Table + table_rows, Mask, smq, Lse, Delta, seed, bh, rows, cols,
            Q_LEN, K_LEN, scale, p_drop, DROPOUT, DOT,
        )  # fmt: skip
        d_query += tl.dot(d_scores.to(k.dtype), k, input_precision=DOT)
        column, visible = _position_columns(rows, cols, Q_LEN, K_LEN)
        tl.store(DTable + table_rows + column, d_scores, mask=visible)
    _store_rows(DQ + b * sdb + h * sdh, sdn, rows, Q_LEN, dims, D, d_query * scale)


@_jit
def _load_rows(base, stride, rows, n_rows, dims, d):
    """[len(rows), BLOCK_D] of a [N, D] matrix (rows `stride` apart), zero outside it."""
    inside = (rows[:, None] < n_rows) & (dims[None, :] < d)
    return tl.load(base + rows[:, None] * stride + dims[None, :], mask=inside, other=0.0)


@_jit
def _store_rows(base, stride, rows, n_rows, dims, d, x):
    """Write x into the rows of a [N, D] matrix that exist (the counterpart of _load_rows)."""
    inside = (rows[:, None] < n_rows) & (dims[None, :] < d)
    tl.store(base + rows[:, None] * stride + dims[None, :], x, mask=inside)


@_jit
def _key_end(block, BLOCK_M, Q_LEN, K_LEN):
    """One past the last key any row of query block `block` sees: its last row's diagonal."""
    return tl.minimum((block + 1) * BLOCK_M + K_LEN - Q_LEN, K_LEN)


@_jit
def _position_columns(rows, cols, Q_LEN, K_LEN):
    """The table's column of each (query, key) pair of a tile, and which pairs are causal
    (key j <= i + M: then also j < K, and the column stays within 1 ... K)."""
    visible = (cols[None, :] <= rows[:, None] + K_LEN - Q_LEN) & (rows[:, None] < Q_LEN)
    return cols[None, :] + Q_LEN - rows[:, None], visible


@_jit
def _scores(q, k, table, Mask, smq, rows, cols, Q_LEN, K_LEN, scale, DOT: tl.constexpr):
    """A tile's scores, times log2(e) for exp2: (q + u) k scaled, the position table read at
    each pair's column, the mask; -inf where not causal (`table` points at the tile's rows)."""
    column, visible = _position_columns(rows, cols, Q_LEN, K_LEN)
    position = tl.load(table + column, mask=visible, other=0.0).to(tl.float32)
    mask = tl.load(Mask + rows[:, None] * smq + cols[None, :], mask=visible, other=-float("inf"))
    content = tl.dot(q, tl.trans(k), input_precision=DOT)
    return (content * scale + position + mask.to(tl.float32)) * 1.4426950408889634  # log2(e)


@_jit
def _kept(seed, bh, rows, cols, Q_LEN, K_LEN, p_drop):
    """Which elements of a tile dropout keeps: Philox at each element's flat index in
    [B, H, Q, K] draws at least p_drop, the same draw in every pass."""
    index = (bh * Q_LEN + rows[:, None]).to(tl.int64) * K_LEN + cols[None, :]
    return tl.rand(seed, index) >= p_drop


@_jit
def _dropped(x, kept, p_drop):
    """x where kept, scaled by 1 / (1 - p_drop) so its expectation stays x, else 0."""
    return tl.where(kept, x / (1 - p_drop), 0.0)


@_jit
def _tile_grads(
    q, k, v, grad, table, Mask, smq, Lse, Delta, seed, bh, rows, cols,
    Q_LEN, K_LEN, scale, p_drop, DROPOUT: tl.constexpr, DOT: tl.constexpr,
):  # fmt: skip
    """A tile's probabilities as the forward applied them (dropped out) and the gradient of its
    scores: dS = P * (dP - rowsum(dP * P)), dP through the same dropout mask."""
    inside = rows < Q_LEN
    lse = tl.load(Lse + bh * Q_LEN + rows, mask=inside, other=0.0)
    delta = tl.load(Delta + bh * Q_LEN + rows, mask=inside, other=0.0)
    scores = _scores(q, k, table, Mask, smq, rows, cols, Q_LEN, K_LEN, scale, DOT)
    p = tl.exp2(scores - lse[:, None])
    d_probs = tl.dot(grad, tl.trans(v), input_precision=DOT)
    applied = p
    if DROPOUT:
        kept = _kept(seed, bh, rows, cols, Q_LEN, K_LEN, p_drop)
        applied = _dropped(p, kept, p_drop)
        d_probs = _dropped(d_probs, kept, p_drop)
    return applied, p * (d_probs - delta[:, None])
