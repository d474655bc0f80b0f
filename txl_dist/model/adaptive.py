"""Adaptive input embeddings and projected adaptive log-softmax (Baevski & Auli; Grave et al.).

The vocabulary is split by `cutoffs` into a frequent head cluster and rarer tail clusters;
cluster i embeds in d_embed // div_val**i dims and projects to d_model. With div_val == 1 one
matrix covers the whole vocabulary (the reference layout), so a plain softmax is the case of no
cutoffs. Log-probabilities are always computed in float32, so both modules are safe under
bf16/fp16 autocast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from txl_dist.model.config import TXLConfig

IGNORE_INDEX = -100
"""Target id that is not scored (padding): torch's cross_entropy default, as the data pipeline's."""


def cluster_bounds(config: TXLConfig) -> list[tuple[int, int]]:
    """[(start, end)] token-id range of each cluster, head first."""
    edges = [0, *config.cutoffs, config.n_token]
    return list(zip(edges[:-1], edges[1:]))


def cluster_dims(config: TXLConfig) -> list[int]:
    """Embedding size of each cluster."""
    return [config.d_embed // config.div_val**i for i in range(len(config.cutoffs) + 1)]


def uninitialized_embedding(rows: int, dim: int) -> nn.Embedding:
    """An embedding table left as allocated: TransformerXL.init_weights draws every weight, or a
    checkpoint's values replace them. nn.Embedding's own normal_ init would be work thrown away
    (seconds for a 267k-word table), and on the meta device it imports torch's compiler stack."""
    return nn.Embedding(rows, dim, _weight=torch.empty(rows, dim))


class AdaptiveEmbedding(nn.Module):
    """Token ids [B, T] -> embeddings [B, T, d_model], scaled by sqrt(d_model) as the reference."""

    def __init__(self, config: TXLConfig):
        super().__init__()
        self.div_val = config.div_val
        self.bounds = cluster_bounds(config)
        self.scale = config.d_model**0.5
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if config.div_val == 1:
            self.emb_layers.append(uninitialized_embedding(config.n_token, config.d_embed))
            if config.d_model != config.d_embed:
                self.emb_projs.append(nn.Parameter(torch.empty(config.d_model, config.d_embed)))
        else:
            for (start, end), dim in zip(self.bounds, cluster_dims(config)):
                self.emb_layers.append(uninitialized_embedding(end - start, dim))
                self.emb_projs.append(nn.Parameter(torch.empty(config.d_model, dim)))

    def forward(self, input_ids: Tensor) -> Tensor:
        if self.div_val == 1:
            embedded = self.emb_layers[0](input_ids)  # [B, T, d_embed]
            if len(self.emb_projs):
                embedded = F.linear(embedded, self.emb_projs[0])  # [B, T, d_model]
            return embedded * self.scale
        # Every cluster embeds every token (ids clamped into its range) and the wrong clusters
        # are zeroed: static shapes, no host sync, one dtype under autocast. The wasted work is
        # tiny next to the transformer layers.
        embedded = 0
        for (start, end), layer, proj in zip(self.bounds, self.emb_layers, self.emb_projs):
            local_ids = (input_ids - start).clamp(0, end - start - 1)
            in_cluster = ((input_ids >= start) & (input_ids < end)).unsqueeze(-1)  # [B, T, 1]
            projected = F.linear(layer(local_ids), proj)  # [B, T, d_model]
            embedded = embedded + projected * in_cluster
        return embedded * self.scale


class AdaptiveLogSoftmax(nn.Module):
    """Projected adaptive log-softmax: hidden [N, d_model] -> NLL [N] or log-probs [N, n_token]."""

    def __init__(self, config: TXLConfig):
        super().__init__()
        self.div_val = config.div_val
        self.bounds = cluster_bounds(config)
        self.n_clusters = len(config.cutoffs)
        dims = cluster_dims(config)
        if self.n_clusters:
            self.cluster_weight = nn.Parameter(torch.empty(self.n_clusters, config.d_embed))
            self.cluster_bias = nn.Parameter(torch.empty(self.n_clusters))
        self.out_layers = nn.ModuleList()
        self.out_projs = nn.ParameterList()
        if config.div_val == 1:
            self.out_layers.append(nn.Linear(config.d_embed, config.n_token))
            if config.d_model != config.d_embed:
                for _ in self.bounds:
                    self.out_projs.append(nn.Parameter(torch.empty(config.d_model, config.d_embed)))
        else:
            for (start, end), dim in zip(self.bounds, dims):
                self.out_layers.append(nn.Linear(dim, end - start))
                self.out_projs.append(nn.Parameter(torch.empty(config.d_model, dim)))

    def _cluster_params(self) -> list[tuple[Tensor, Tensor]]:
        """(weight, bias) of each cluster's own tokens, head first: with div_val 1 consecutive
        row blocks of the one output layer (RowBlocks: their gradients meet in one pass)."""
        if self.div_val != 1:
            return [(layer.weight, layer.bias) for layer in self.out_layers]
        sizes = tuple(end - start for start, end in self.bounds)
        layer = self.out_layers[0]
        return list(zip(RowBlocks.apply(layer.weight, sizes), RowBlocks.apply(layer.bias, sizes)))

    def _cluster_logits(
        self, hidden: Tensor, i: int, params: list[tuple[Tensor, Tensor]]
    ) -> Tensor:
        """Logits of cluster i's own tokens (plus the tail-cluster logits for the head)."""
        weight, bias = params[i]
        if i == 0 and self.n_clusters:
            weight = torch.cat([weight, self.cluster_weight], dim=0)
            bias = torch.cat([bias, self.cluster_bias], dim=0)
        if len(self.out_projs):
            hidden = F.linear(hidden, self.out_projs[i].t())  # [N, d_model] -> [N, dim_i]
        return F.linear(hidden, weight, bias)

    def _head_log_probs(self, hidden: Tensor, params: list[tuple[Tensor, Tensor]]) -> Tensor:
        """[N, head size + n_clusters]; tail cluster i's mass is column -i (the reference order)."""
        return F.log_softmax(self._cluster_logits(hidden, 0, params).float(), dim=-1)

    def forward(
        self, hidden: Tensor, targets: Tensor, cluster_sizes: list[int] | None = None
    ) -> Tensor:
        """NLL [N] (float32) of targets [N] under hidden [N, d_model]; ignored targets score 0.

        Every cluster is computed on every call, with however many rows it has (possibly none),
        so each rank touches the same parameters in the same order whatever its batch holds:
        under ZeRO-3 each access is a collective. The rows per cluster size the tail products:
        `cluster_sizes` (from `cluster_sizes(targets)` on the host, before the targets went to
        the device) makes the call free of host syncs; without them they are counted here, one
        device-to-host transfer.
        """
        params = self._cluster_params()
        if not self.n_clusters:
            return F.cross_entropy(
                self._cluster_logits(hidden, 0, params).float(),
                targets,
                reduction="none",
                ignore_index=IGNORE_INDEX,
            )
        cluster = self._clusters(targets)
        sizes = self.cluster_sizes(targets) if cluster_sizes is None else cluster_sizes
        # One gather from the head for every row: its own token's column for a head-cluster
        # target, the cluster's column -i for a target in tail cluster i (ignored rows: any
        # column, zeroed at the end), so the head's gradient is built in one pass.
        head_size = self.bounds[0][1]
        column = torch.where(cluster == 0, targets, head_size + self.n_clusters - cluster)
        head = self._head_log_probs(hidden, params)  # [N, head size + n_clusters]
        nll = -head.gather(1, column.clamp(min=0).unsqueeze(1)).squeeze(1)
        groups = torch.argsort(cluster, stable=True).split(sizes)
        for i in range(1, self.n_clusters + 1):
            rows = groups[i]
            local = (targets[rows] - self.bounds[i][0]).unsqueeze(1)  # [n_i, 1]
            tail = F.log_softmax(self._cluster_logits(hidden[rows], i, params).float(), dim=-1)
            nll = nll.index_add(0, rows, tail.gather(1, local).squeeze(1), alpha=-1)
        return nll.masked_fill(targets == IGNORE_INDEX, 0.0)

    def cluster_sizes(self, targets: Tensor) -> list[int]:
        """Rows per cluster (head first) of targets [N], then the ignored targets: what
        `forward` takes as `cluster_sizes`. Raises on ids outside [0, n_token).

        On a host tensor this costs no device sync; on a device tensor it is one transfer.
        """
        counts = torch.bincount(self._clusters(targets.reshape(-1)), minlength=self.n_clusters + 3)
        *sizes, outside, ignored = counts.tolist()
        if outside:
            raise ValueError(
                f"{outside} target ids are outside [0, n_token={self.bounds[-1][1]}) "
                f"(and not the ignore index {IGNORE_INDEX}): the data's vocabulary does not "
                "match the model"
            )
        return [*sizes, outside, ignored]

    def _clusters(self, targets: Tensor) -> Tensor:
        """Each target's cluster (head 0); n_clusters + 1 for ids outside [0, n_token),
        n_clusters + 2 for ignored targets: the groups `cluster_sizes` counts."""
        cluster = sum((targets >= end).long() for _, end in self.bounds)
        cluster = torch.where(targets < 0, self.n_clusters + 1, cluster)
        return torch.where(targets == IGNORE_INDEX, self.n_clusters + 2, cluster)

    def log_probs(self, hidden: Tensor) -> Tensor:
        """Log-probabilities over the whole vocabulary, [N, n_token] float32."""
        params = self._cluster_params()
        head = self._head_log_probs(hidden, params)
        parts = [head[:, : self.bounds[0][1]]]
        for i in range(1, self.n_clusters + 1):
            tail = F.log_softmax(self._cluster_logits(hidden, i, params).float(), dim=-1)
            parts.append(head[:, -i, None] + tail)
        return torch.cat(parts, dim=-1)


class RowBlocks(torch.autograd.Function):
    """A tensor's consecutive row blocks (sizes summing to its rows), as views.

    Slicing's backward writes each block's gradient into a zeroed tensor of the whole table's
    size, one per block, which autograd then adds up: for wt103_base's tied 267,735 x 410
    table, four full-size zero fills and three full-size additions a step. Here the blocks'
    gradients are joined in one pass.
    """

    @staticmethod
    def forward(ctx, table: Tensor, sizes: tuple[int, ...]) -> tuple[Tensor, ...]:
        return table.split(sizes)

    @staticmethod
    def backward(ctx, *grads: Tensor) -> tuple[Tensor, None]:
        # A block no loss reached arrives as zeros (autograd materialises them).
        return torch.cat(grads), None
