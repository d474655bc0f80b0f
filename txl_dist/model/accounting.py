"""What a config costs: parameters, FLOPs per token, and memory per rank, without building it.

The model is built on the meta device, so even the 0.8B lm1b model costs no memory. txl-inspect
prints these figures; the engine takes its FLOPs per token (for MFU) from here.
"""

from __future__ import annotations

import math

import torch

from txl_dist.model.adaptive import cluster_bounds, cluster_dims
from txl_dist.model.config import TXLConfig
from txl_dist.model.transformer import TransformerXL

# Bytes of model states per parameter for mixed-precision Adam (ZeRO paper, section 3):
# fp16/bf16 weights 2 + gradients 2 + fp32 master weights, momentum and variance 12.
ZERO_STAGES = {
    0: lambda n: 16.0,
    1: lambda n: 4.0 + 12.0 / n,
    2: lambda n: 2.0 + 14.0 / n,
    3: lambda n: 16.0 / n,
}


def build_on_meta(config: TXLConfig) -> TransformerXL:
    with torch.device("meta"):
        return TransformerXL(config, init_weights=False)


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


def head_cluster_size(c: TXLConfig) -> int:
    """Columns of the softmax every token pays for: the head cluster plus one per tail."""
    return (c.cutoffs[0] if c.cutoffs else c.n_token) + len(c.cutoffs)


def forward_flops_per_token(c: TXLConfig, rows: int) -> float:
    """2 x multiply-adds per token of a training segment with full memory, `rows` rows a forward.

    Counts the embedding projections, the query/key/value/output projections (keys and values
    over the K = tgt_len + mem_len context, amortised over tgt_len queries), the relative-position
    projection (once per forward on K encodings that all `rows` rows share), the three attention
    products over K keys, the feed-forward block, and the softmax head cluster with its
    projection. Tail clusters of the softmax touch only rare tokens and are left out.
    """
    inner = c.n_head * c.d_head
    k_len = c.tgt_len + c.mem_len
    per_layer = (
        c.d_model * inner  # queries
        + 2 * c.d_model * inner * k_len / c.tgt_len  # keys, values
        + c.d_model * inner * k_len / (c.tgt_len * rows)  # relative positions
        + inner * c.d_model  # output projection
        + 3 * k_len * inner  # (q+u)k, (q+v)r, attention x values
        + 2 * c.d_model * c.d_inner  # feed-forward
    )
    head_dim = cluster_dims(c)[0]
    softmax = head_cluster_size(c) * head_dim + (c.d_model * head_dim if _projected(c) else 0)
    return 2.0 * (embedding_projections(c) + c.n_layer * per_layer + softmax)


def _projected(c: TXLConfig) -> bool:
    """Whether the clusters have projections to d_model (adaptive.py builds them in this case)."""
    return c.div_val != 1 or c.d_model != c.d_embed


def embedding_projections(c: TXLConfig) -> int:
    """Multiply-adds per token of the input projections: every cluster projects every token."""
    if not _projected(c):
        return 0
    dims = cluster_dims(c) if c.div_val != 1 else [c.d_embed]
    return c.d_model * sum(dims)


def train_flops_per_token(c: TXLConfig, rows: int) -> float:
    """Forward plus backward: the backward pass costs twice the forward's matmuls."""
    return 3 * forward_flops_per_token(c, rows)


TAIL_TARGET_SHARE = 0.05
"""Share of training targets the memory estimate puts in the softmax's tail clusters, all in the
widest: real text's mix (WikiText-103 puts a few percent of its tokens past the 20,000 most
frequent words), not uniform ids, which put most of them there."""


def activation_bytes_per_row(c: TXLConfig, dtype_bytes: int = 2) -> float:
    """Estimated training activations of one micro-batch row: what autograd keeps for backward.

    An estimate (temporaries, allocator slack and the rare rows of tail clusters are left out)
    for choosing a micro batch before the first run. Per layer, with Q = tgt_len, K = Q +
    mem_len, d = d_model, I = n_head x d_head: the [memory; segment] context, queries with both
    biases, keys and values; three [heads, Q, K] score tensors (position scores, mask bias,
    probabilities) and a dropout mask; the attention output, projections, residuals and layer
    norms; the feed-forward hidden layer. Plus the memory the row carries and the float32
    log-probabilities of the head cluster for every target and of the widest tail cluster for
    TAIL_TARGET_SHARE of them.
    """
    q, k, d, inner = c.tgt_len, c.tgt_len + c.mem_len, c.d_model, c.n_head * c.d_head
    scores = c.n_head * q * k
    per_layer = dtype_bytes * (
        k * d + 3 * q * inner + 2 * k * inner + 3 * scores + 4 * q * d + 2 * q * c.d_inner
    ) + (scores + 2 * q * d + q * c.d_inner)  # one-byte dropout masks
    memory = c.n_layer * c.mem_len * d * dtype_bytes
    tail = max((end - start for start, end in cluster_bounds(c)[1:]), default=0)
    logits = head_cluster_size(c) + TAIL_TARGET_SHARE * tail
    softmax = 4 * q * logits + 2 * dtype_bytes * q * d  # float32 log-softmax
    return c.n_layer * per_layer + memory + softmax


def rank_memory_bytes(
    c: TXLConfig, zero_stage: int, world_size: int, micro_rows: int, dtype_bytes: int = 2
) -> float:
    """txl-inspect's estimate of one rank's training memory: the model states of ZeRO stage
    `zero_stage` at `world_size` ranks plus the activations of `micro_rows` rows."""
    total, _ = count_parameters(build_on_meta(c))
    states = ZERO_STAGES[zero_stage](world_size) * total
    return states + activation_bytes_per_row(c, dtype_bytes) * micro_rows


# Beside tensors an asynchronous save's snapshot holds pickled records (client state, RNG states,
# DeepSpeed's config and parameter shapes: kilobytes for the shipped configs) and zip entries.
SNAPSHOT_RECORD_BYTES = 1 << 20


def memories_bytes(c: TXLConfig, rows_per_rank: int, dtype_bytes: int) -> int:
    """A rank's memories once they are full: [rows, mem_len, d_model] per layer."""
    return c.n_layer * rows_per_rank * c.mem_len * c.d_model * dtype_bytes


def snapshot_bytes(
    c: TXLConfig, parameters: int, zero_stage: int, world_size: int, global_rows: int,
    low_precision: bool,
) -> tuple[float, float]:  # fmt: skip
    """txl-inspect's host memory of an asynchronous save's snapshot with Adam (what DeepSpeed
    writes): (rank 0's, each other rank's).

    Rank 0 writes the weights (ZeRO-0 to 2; ZeRO-3 writes none). The fp32 master weights and
    Adam's two moments (12 bytes a parameter, the master being the weights themselves in fp32)
    are split over the ranks under ZeRO; without it, rank 0 writes them whole.
    """
    weights = 2 if low_precision else 4
    optimizer = 12 * parameters
    if zero_stage == 0:
        master_in_weights = 0 if low_precision else 4 * parameters
        first, others = weights * parameters + optimizer - master_in_weights, 0.0
    elif zero_stage == 3:
        first = others = optimizer / world_size
    else:
        others = optimizer / world_size
        first = weights * parameters + others
    rows = math.ceil(global_rows / world_size)
    rest = memories_bytes(c, rows, weights) + SNAPSHOT_RECORD_BYTES
    return first + rest, others + rest
