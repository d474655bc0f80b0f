"""The `transformers` config of an exported Transformer-XL: our TXLConfig's fields under `txl`.

Shipped into the export directory as it is; it imports transformers only.
"""

from __future__ import annotations

from transformers import PretrainedConfig


class TXLHFConfig(PretrainedConfig):
    """The Hugging Face side of the config; the model itself reads `txl`."""

    model_type = "txl_dist"

    def __init__(self, txl: dict | None = None, **kwargs):
        self.txl = dict(txl or {})
        """TXLConfig.to_dict() of the exported model."""
        self.vocab_size = self.txl.get("n_token")
        """The vocabulary size, under the name generation utilities read."""
        super().__init__(**kwargs)
