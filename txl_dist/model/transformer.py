"""The Transformer-XL language model: layers, segment-level recurrence; save / load call
pretrained.py.

Numerics follow the reference `MemTransformerLM` with attn_type=0; tensors are batch-first.
Memory: for each layer, the last `mem_len` hidden states that entered it, detached, so
gradients never cross a segment boundary (section 3.2 of the paper).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from txl_dist.model.adaptive import AdaptiveEmbedding, AdaptiveLogSoftmax
from txl_dist.model.attention import (
    RelMultiHeadAttention,
    attention_bias,
    padding_bias,
    relative_distances,
    sinusoid_encoding,
)
from txl_dist.model.config import TXLConfig
from txl_dist.model.dropout import Dropout
from txl_dist.model.pretrained import load_export, save_export
from txl_dist.model.widths import layer_norm, pad_to, padded_width

Gather = Callable[[list[nn.Parameter]], contextlib.AbstractContextManager]
"""Makes the given (partitioned) parameters whole inside its context, e.g. ZeRO-3's gather."""


class TXLOutput(NamedTuple):
    """What one forward pass returns (a NamedTuple, so ZeRO-3 sees the tensors in it)."""

    loss: Tensor | None
    """Per-token NLL [B, T] (float32) when targets were given."""
    mems: list[Tensor]
    """New memory, one [B, mem_len or less, d_model] tensor per layer, detached."""
    log_probs: Tensor | None
    """Log-probabilities [B, T, n_token] (float32) when no targets were given."""


class FeedForward(nn.Module):
    """Position-wise feed-forward block with residual and layer norm."""

    def __init__(self, config: TXLConfig):
        super().__init__()
        self.pre_lnorm = config.pre_lnorm
        self.width_multiple = config.width_multiple
        self.CoreNet = nn.Sequential(  # noqa: N815 (reference state-dict name)
            nn.Linear(config.d_model, config.d_inner),
            nn.ReLU(inplace=True),
            Dropout(config.dropout),
            nn.Linear(config.d_inner, config.d_model),
            Dropout(config.dropout),
        )
        self.layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, h: Tensor) -> Tensor:
        """h [B, Q, W]: the residual stream, d_model or wider with zero columns (widths.py)."""
        if self.pre_lnorm:
            return h + self._core(layer_norm(self.layer_norm, h))
        return layer_norm(self.layer_norm, h + self._core(h))

    def _core(self, h: Tensor) -> Tensor:
        """CoreNet, with d_inner padded as model.width_multiple asks and the model dimension
        to the stream's width. Exact: a zero row and bias give a zero hidden unit, ReLU and
        dropout keep it zero, and the zero column of the second weight drops it; zero input
        columns meet the stream's zero columns, zero output rows and bias keep them zero."""
        first, _, inner_drop, second, out_drop = self.CoreNet
        inner = padded_width(first.weight.size(0), self.width_multiple, h.device)
        width = h.size(-1)
        w1, b1 = pad_to(pad_to(first.weight, width), inner, 0), pad_to(first.bias, inner)
        w2, b2 = pad_to(pad_to(second.weight, inner), width, 0), pad_to(second.bias, width)
        hidden = inner_drop(F.relu(F.linear(h, w1, b1), inplace=True))
        return out_drop(F.linear(hidden, w2, b2))


class DecoderLayer(nn.Module):
    def __init__(self, config: TXLConfig):
        super().__init__()
        self.dec_attn = RelMultiHeadAttention(config)
        self.pos_ff = FeedForward(config)

    def forward(self, h, mem, pos_enc, r_w_bias, r_r_bias, mask) -> Tensor:
        return self.pos_ff(self.dec_attn(h, mem, pos_enc, r_w_bias, r_r_bias, mask))


class TransformerXL(nn.Module):
    """Transformer-XL language model: `model(input_ids, targets=None, mems=None) -> TXLOutput`."""

    def __init__(self, config: TXLConfig, init_weights: bool = True):
        super().__init__()
        self.config = dataclasses.replace(config)  # ours: set_lengths never edits the caller's
        self.word_emb = AdaptiveEmbedding(config)
        self.drop = Dropout(config.dropout)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layer))
        # u and v of the paper: one pair shared by all layers, as in the reference code.
        self.r_w_bias = nn.Parameter(torch.empty(config.n_head, config.d_head))
        self.r_r_bias = nn.Parameter(torch.empty(config.n_head, config.d_head))
        self.crit = AdaptiveLogSoftmax(config)
        # The layers' CUDA graphs where train.cuda_graphs asks (txl_dist/engine/graphs.py).
        self.graphed_layers = None
        self.tie_weights()
        if init_weights:
            self.init_weights()

    def tie_weights(self) -> None:
        """Share output weights / projections with the input ones, as the config asks."""
        cfg = self.config
        if cfg.tie_weight:
            for out_layer, emb_layer in zip(self.crit.out_layers, self.word_emb.emb_layers):
                out_layer.weight = emb_layer.weight
        for i, tie in enumerate(cfg.tie_projs):
            if tie and cfg.div_val == 1 and cfg.d_model != cfg.d_embed:
                self.crit.out_projs[i] = self.word_emb.emb_projs[0]
            elif tie and cfg.div_val != 1:
                self.crit.out_projs[i] = self.word_emb.emb_projs[i]

    def init_weights(self, gathered: Gather | None = None) -> None:
        """The reference `weights_init` (init='normal'), module by module; tied tensors once.

        `gathered(params)` makes partitioned parameters whole while they are written (ZeRO-3
        builds the model already partitioned). Values are drawn in float32 on the CPU whatever
        the parameters' dtype and device, so a partitioned bf16 build on a GPU gets the same
        weights as a plain one.
        """
        gathered = gathered or (lambda params: contextlib.nullcontext())
        done: set[int] = set()

        def init_module(module: nn.Module) -> None:
            plan = [entry for entry in self._init_plan(module) if id(entry[0]) not in done]
            done.update(id(param) for param, _, _ in plan)
            with gathered([param for param, _, _ in plan]), torch.no_grad():
                for param, mean, std in plan:
                    # Drawn on the CPU's generator wherever the parameter lives: ZeRO-3 builds on
                    # the GPU, the other stages on the CPU, and both must start from the same.
                    values = torch.empty(param.shape, dtype=torch.float32, device="cpu")
                    param.copy_(values.normal_(mean, std) if std else values.fill_(mean))

        self.apply(init_module)

    def _init_plan(self, module: nn.Module) -> list[tuple[nn.Parameter, float, float]]:
        """(parameter, mean, std) for the tensors `module` owns; std 0 means the constant mean."""
        std, proj_std = self.config.init_std, self.config.proj_init_std
        if isinstance(module, (nn.Linear, nn.Embedding)):
            bias = getattr(module, "bias", None)
            return [(module.weight, 0.0, std)] + ([(bias, 0.0, 0.0)] if bias is not None else [])
        if isinstance(module, nn.LayerNorm):
            return [(module.weight, 1.0, std), (module.bias, 0.0, 0.0)]
        if isinstance(module, AdaptiveEmbedding):
            return [(proj, 0.0, proj_std) for proj in module.emb_projs]
        if isinstance(module, AdaptiveLogSoftmax):
            plan = [(proj, 0.0, proj_std) for proj in module.out_projs]
            if module.n_clusters:
                plan += [(module.cluster_weight, 0.0, std), (module.cluster_bias, 0.0, 0.0)]
            return plan
        if isinstance(module, TransformerXL):
            return [(module.r_w_bias, 0.0, std), (module.r_r_bias, 0.0, std)]
        return []

    def set_lengths(
        self,
        tgt_len: int | None = None,
        mem_len: int | None = None,
        clamp_len: int | None = None,
        same_length: bool | None = None,
    ) -> None:
        """Change context lengths (e.g. to the evaluation ones); weights are unaffected."""
        changes = dict(
            tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len, same_length=same_length
        )
        for name, value in changes.items():
            if value is not None:
                setattr(self.config, name, value)
        self.config.validate()

    @contextlib.contextmanager
    def lengths(
        self,
        tgt_len: int | None = None,
        mem_len: int | None = None,
        clamp_len: int | None = None,
        same_length: bool | None = None,
    ) -> Iterator[TransformerXL]:
        """Within the block the model runs with these lengths, afterwards with the previous ones."""
        c = self.config
        saved = (c.tgt_len, c.mem_len, c.clamp_len, c.same_length)
        self.set_lengths(tgt_len, mem_len, clamp_len, same_length)
        try:
            yield self
        finally:
            self.set_lengths(*saved)

    def init_mems(self, batch_size: int) -> list[Tensor]:
        """Empty memory [B, 0, d_model] for each layer, on the model's device and dtype."""
        param = self.r_w_bias
        empty = torch.empty(
            batch_size, 0, self.config.d_model, dtype=param.dtype, device=param.device
        )
        return [empty] * self.config.n_layer

    def forward(
        self,
        input_ids: Tensor,
        targets: Tensor | None = None,
        mems: list[Tensor] | None = None,
        cluster_sizes: list[int] | None = None,
        key_padding: Tensor | None = None,
    ) -> TXLOutput:
        """input_ids, targets: [B, T] int64; mems: from the previous segment (None: no memory);
        cluster_sizes: `self.cluster_sizes(targets)` taken on the host before the copy to the
        device, which spares the step its one host sync (None: counted on the device);
        key_padding: [B, M + T] bool, True on the padding of a left-padded batch (memory and
        segment), which no real token attends to."""
        cfg = self.config
        batch, q_len = input_ids.shape
        if mems is None:
            mems = self.init_mems(batch)
        m_len = mems[0].size(1)
        device = input_ids.device

        # In the parameters' dtype: DeepSpeed's bf16/fp16 engines cast the whole module.
        lengths = (q_len, m_len, cfg.mem_len, cfg.same_length, cfg.clamp_len, cfg.d_model)
        mask, pos_enc = segment_constants(*lengths, self.r_w_bias.dtype, device)
        if key_padding is not None:
            mask = mask + padding_bias(key_padding, mask.dtype)  # [B, 1, Q, K]
        # The residual stream may be wider than d_model, its extra columns zero (widths.py).
        width = padded_width(cfg.d_model, cfg.width_multiple, device)
        pos_enc = pad_to(self.drop(pos_enc), width)  # [K, W]

        h = pad_to(self.drop(self.word_emb(input_ids)), width)  # [B, Q, W]
        h, layer_inputs = self.run_layers(h, mems, pos_enc, mask)
        new_mems = self._update_mems(layer_inputs, mems)
        hidden = self.drop(h)[..., : cfg.d_model].reshape(batch * q_len, cfg.d_model)

        if targets is None:
            log_probs = self.crit.log_probs(hidden).view(batch, q_len, -1)
            return TXLOutput(loss=None, mems=new_mems, log_probs=log_probs)
        loss = self.crit(hidden, targets.reshape(-1), cluster_sizes).view(batch, q_len)
        return TXLOutput(loss=loss, mems=new_mems, log_probs=None)

    def run_layers(
        self, h: Tensor, mems: list[Tensor], pos_enc: Tensor, mask: Tensor
    ) -> tuple[Tensor, list[Tensor]]:
        """The decoder layers over h with their memories: (output, each layer's input)."""
        graphs = self.graphed_layers
        if graphs is not None and (run := graphs.maybe_run(h, mems, pos_enc, mask)) is not None:
            return run
        layer_inputs = []
        for layer, mem in zip(self.layers, mems):
            layer_inputs.append(h)
            h = layer(h, mem, pos_enc, self.r_w_bias, self.r_r_bias, mask)
        return h, layer_inputs

    def cluster_sizes(self, targets: Tensor) -> list[int]:
        """The targets' rows per softmax cluster, for `forward`: count them on the host tensor
        before it goes to the device. Raises ValueError on ids outside the vocabulary."""
        return self.crit.cluster_sizes(targets)

    @torch.no_grad()
    def _update_mems(self, layer_inputs: list[Tensor], mems: list[Tensor]) -> list[Tensor]:
        """Keep the last mem_len states of [old memory; this segment] for each layer, at
        d_model's width whatever the stream's."""
        new_mems = []
        for mem, h in zip(mems, layer_inputs):
            context = torch.cat([mem.to(h.dtype), h[..., : mem.size(-1)]], dim=1)  # [B, M+Q, d]
            start = max(0, context.size(1) - self.config.mem_len)
            # A copy, not a view into context: every memory has the same strides (a compiled
            # layer sees one memory layout) and the dropped states are freed.
            new_mems.append(context[:, start:].detach().contiguous())
        return new_mems

    # ---- plain-PyTorch checkpoints: an export's directory (pretrained.py) ----

    def save_pretrained(
        self,
        directory: str | os.PathLike,
        format: str = "safetensors",
        write_extra: Callable[[str], None] | None = None,
    ) -> None:
        """Write config.json and the weights into `directory`, replacing it whole
        (pretrained.save_export); `write_extra(tmp)` adds files before it takes its place."""
        save_export(self, directory, format, write_extra)

    @classmethod
    def from_pretrained(
        cls, directory: str | os.PathLike, map_location: str | torch.device = "cpu"
    ) -> TransformerXL:
        """Load what `save_pretrained` (or txl-export) wrote, with torch (and safetensors) only,
        its files checked against each other first (pretrained.load_export)."""
        return load_export(cls, directory, map_location)


@functools.lru_cache(maxsize=16)
def segment_constants(
    q_len: int,
    m_len: int,
    mem_len: int,
    same_length: bool,
    clamp_len: int,
    d_model: int,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[Tensor, Tensor]:
    """(attention mask [Q, K], position encodings [K, d_model]) of a segment's lengths.

    Made once per lengths, not per step: training repeats two lengths (the first segment
    without memory, then mem_len), evaluation a few more. Callers never write into them.
    Never inference tensors (an evaluation may be the first to make them), never in a graph.
    """
    with torch.inference_mode(False), torch.no_grad():
        mask = attention_bias(q_len, m_len, mem_len, same_length, device, dtype)
        distances = relative_distances(m_len + q_len, clamp_len, device)
        return mask, sinusoid_encoding(distances, d_model).to(dtype)
