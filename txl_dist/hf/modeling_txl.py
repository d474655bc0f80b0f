"""Transformer-XL as a `transformers` causal language model, for `AutoModelForCausalLM`.

Shipped into the export directory with the txl_dist.model sources it imports, their imports made
relative (txl_dist.hf.export): the directory needs torch and transformers only.

The model runs as txl-generate runs it: the evaluation mem_len and clamp_len, same_length off
(every query sees all the context it can). `logits` are log-probabilities (the adaptive softmax
normalizes them; their softmax is the distribution). `generate()` carries the memory: the
prompt goes in as one segment, then each new token alone on the memory of the previous step (the
`mems` of the output), exactly as txl-generate does, so a token costs one step of length 1; the
memory is at most mem_len states per layer, however long the generation. A batch of prompts of
different lengths is padded on the left: with its attention_mask, no real token attends to the
padding (in memory or segment), and the padding, oldest, leaves the memory first, so each row
generates what it would alone; the padding's ids are never read (any id, in the vocabulary or
not).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor
from transformers import GenerationMixin, PreTrainedModel
from transformers.utils import ModelOutput

from txl_dist.hf.configuration_txl import TXLHFConfig
from txl_dist.model.config import TXLConfig
from txl_dist.model.transformer import TransformerXL

IGNORE_INDEX = -100  # the label transformers' losses skip


@dataclass
class TXLCausalLMOutput(ModelOutput):
    """What the forward pass returns."""

    loss: Tensor | None = None
    """Mean NLL of labels[:, 1:] (IGNORE_INDEX skipped), when labels were given."""
    logits: Tensor | None = None
    """Log-probabilities [B, T, n_token] (float32) of the next token at each position."""
    mems: list[Tensor] | None = None
    """The memory for the next segment, one [B, <= mem_len, d_model] tensor per layer."""


def key_padding(attention_mask: Tensor | None, input_ids: Tensor, mems) -> Tensor | None:
    """[B, M + T] True on padding, from transformers' attention_mask over everything the rows
    have seen: its last M + T columns are the memory's and this segment's (the memory keeps
    the newest states). None without padding."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    keys = (0 if mems is None else mems[0].size(1)) + input_ids.size(1)
    if attention_mask.shape != (input_ids.size(0), attention_mask.size(1)) or (
        attention_mask.size(1) < keys
    ):
        raise ValueError(
            f"attention_mask {tuple(attention_mask.shape)} does not cover the {keys} positions "
            "of the memory and the input: pass the mask of every token given so far"
        )
    return attention_mask[:, -keys:] == 0


class TXLForCausalLM(PreTrainedModel, GenerationMixin):
    """`model(input_ids, labels=None, mems=None)`; `generate()` carries `mems` between steps."""

    config_class = TXLHFConfig
    base_model_prefix = "txl"
    main_input_name = "input_ids"

    def __init__(self, config: TXLHFConfig):
        super().__init__(config)
        txl_config = TXLConfig.from_dict(config.txl)
        ev = txl_config.for_eval()
        self.txl = TransformerXL(txl_config, init_weights=False)
        self.txl.set_lengths(mem_len=ev.mem_len, clamp_len=ev.clamp_len, same_length=False)
        self.post_init()

    def _init_weights(self, module) -> None:
        """Nothing: every weight comes from the export's model.safetensors."""

    def forward(
        self,
        input_ids: Tensor,
        labels: Tensor | None = None,
        mems: list[Tensor] | None = None,
        attention_mask: Tensor | None = None,
        **kwargs,
    ) -> TXLCausalLMOutput:
        padding = key_padding(attention_mask, input_ids, mems)
        if padding is not None:  # no token attends to it: any id will do, and a character-level
            # export's padding token lies past the vocabulary (tokenizer_files.CHAR_PAD)
            input_ids = input_ids.masked_fill(padding[:, -input_ids.size(1) :], 0)
        out = self.txl(input_ids, mems=mems, key_padding=padding)
        loss = None
        if labels is not None:
            targets = labels[:, 1:]
            scored = targets != IGNORE_INDEX
            picked = out.log_probs[:, :-1].gather(-1, targets.clamp(min=0)[..., None])[..., 0]
            loss = -picked[scored].mean()
        return TXLCausalLMOutput(loss=loss, logits=out.log_probs, mems=out.mems)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the memory is the cache: kept in `mems`, not in a transformers Cache

    def prepare_inputs_for_generation(
        self, input_ids: Tensor, mems=None, attention_mask=None, **kwargs
    ) -> dict:
        """The whole prompt first, then only the newest token on the memory."""
        new = input_ids if mems is None else input_ids[:, -1:]
        return {"input_ids": new, "mems": mems, "attention_mask": attention_mask}

    def _update_model_kwargs_for_generation(self, outputs, model_kwargs, *args, **kwargs):
        model_kwargs = super()._update_model_kwargs_for_generation(
            outputs, model_kwargs, *args, **kwargs
        )
        model_kwargs["mems"] = outputs.mems
        return model_kwargs
