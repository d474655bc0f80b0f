"""TXLConfig: the model's hyperparameters, named after the reference code's command-line flags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from txl_dist.schema import section_from_dict


@dataclass
class TXLConfig:
    """Architecture and context lengths of a Transformer-XL language model (attn_type=0)."""

    n_token: int = 10000
    """Vocabulary size."""
    n_layer: int = 4
    """Number of decoder layers."""
    n_head: int = 8
    """Attention heads per layer."""
    d_model: int = 256
    """Hidden size of the residual stream."""
    d_head: int = 32
    """Size of one attention head."""
    d_inner: int = 1024
    """Hidden size of the position-wise feed-forward block."""
    d_embed: int | None = None
    """Embedding size before projection to d_model; None means d_model."""
    dropout: float = 0.1
    """Dropout on embeddings, positional encodings, sublayer outputs and the final hidden state."""
    dropatt: float = 0.0
    """Dropout on attention probabilities."""
    tgt_len: int = 128
    """Training segment length (tokens predicted per step and row)."""
    mem_len: int = 128
    """Training memory length: hidden states kept per layer from previous segments."""
    clamp_len: int = -1
    """Relative distances above this are clamped; -1 disables clamping."""
    same_length: bool = False
    """Every query attends to exactly mem_len keys (the paper's evaluation setting)."""
    cutoffs: list[int] = field(default_factory=list)
    """Adaptive softmax/input cluster boundaries; empty means a plain softmax."""
    div_val: int = 1
    """Embedding size divisor per cluster: cluster i has d_embed // div_val**i dims."""
    tie_weight: bool = True
    """Share the output layer weights with the input embeddings."""
    tie_projs: list[bool] = field(default_factory=list)
    """Per cluster, share the output projection with the input projection; [] means all False."""
    pre_lnorm: bool = False
    """Layer norm before each sublayer instead of after the residual add."""
    init_std: float = 0.02
    """Standard deviation of the normal init of weights and embeddings."""
    proj_init_std: float = 0.01
    """Standard deviation of the normal init of the adaptive projections."""
    eval_tgt_len: int | None = None
    """Evaluation segment length; None means tgt_len."""
    eval_mem_len: int | None = None
    """Evaluation memory length; None means mem_len."""
    eval_clamp_len: int | None = None
    """Evaluation clamp_len; None means clamp_len."""
    eval_same_length: bool | None = None
    """Evaluation same_length; None means same_length."""
    fused_kernel: bool = False
    """The attention core as one fused Triton kernel on a GPU (rel_attention_kernel.py); off
    until a GPU measures it faster."""
    width_multiple: int = 1
    """On a GPU, d_model and d_inner zero-padded inside the weights to a multiple of this
    (widths.py; exact); 1 leaves them as configured."""
    position_row_multiple: int = 8
    """Rows of the position product padded to a multiple of this (attention.py; exact): 8
    bf16 values are 16 bytes, cuBLAS's aligned kernels; 1 leaves K + 1 rows."""

    def __post_init__(self) -> None:
        if self.d_embed is None:
            self.d_embed = self.d_model
        self.cutoffs = list(self.cutoffs)
        self.tie_projs = list(self.tie_projs) or [False] * (len(self.cutoffs) + 1)
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field if the hyperparameters cannot build a model."""
        for name in ("n_token", "n_layer", "n_head", "d_model", "d_head", "d_inner", "d_embed"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.tgt_len <= 0 or self.mem_len < 0:
            raise ValueError(
                f"model.tgt_len must be > 0 and mem_len >= 0, got {self.tgt_len}, {self.mem_len}"
            )
        if self.cutoffs != sorted(set(self.cutoffs)) or any(
            not 0 < c < self.n_token for c in self.cutoffs
        ):
            raise ValueError(
                "model.cutoffs must be strictly increasing and inside "
                f"(0, n_token={self.n_token}), got {self.cutoffs}"
            )
        if len(self.tie_projs) != len(self.cutoffs) + 1:
            raise ValueError(
                f"model.tie_projs needs one entry per cluster ({len(self.cutoffs) + 1}), "
                f"got {self.tie_projs}"
            )
        if self.div_val < 1 or self.d_embed // self.div_val ** len(self.cutoffs) < 1:
            raise ValueError(
                f"model.div_val={self.div_val} leaves the last cluster with no embedding dims "
                f"(d_embed={self.d_embed}, {len(self.cutoffs)} cutoffs)"
            )
        if self.same_length and self.mem_len < 1:
            raise ValueError("model.same_length needs mem_len >= 1 (each query sees mem_len keys)")
        for name in ("dropout", "dropatt"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("width_multiple", "position_row_multiple"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be 1 or more, got {getattr(self, name)}")

    def for_eval(self) -> TXLConfig:
        """A copy whose context lengths are the evaluation ones."""
        return dataclasses.replace(
            self,
            tgt_len=_first_set(self.eval_tgt_len, self.tgt_len),
            mem_len=_first_set(self.eval_mem_len, self.mem_len),
            clamp_len=_first_set(self.eval_clamp_len, self.clamp_len),
            same_length=_first_set(self.eval_same_length, self.same_length),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TXLConfig:
        """Build from a dict, refusing unknown keys and wrong types (typos must not pass)."""
        return section_from_dict(cls, values, "model")


def _first_set(value, default):
    return default if value is None else value
