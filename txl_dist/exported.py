"""An exported model's directory as the command-line tools read it: dtypes and the vocabulary.

The files themselves (config.json, weights, vocab.txt) are written and loaded by
TransformerXL.save_pretrained / from_pretrained; txl-export, txl-eval and txl-generate share
what else they need of an export here rather than importing each other.
"""

from __future__ import annotations

import os

import torch

from data_pipeline.vocab import Vocab
from txl_dist.model.transformer import VOCAB_FILE

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def export_vocab(model_dir: str) -> Vocab | None:
    """The export's vocabulary (vocab.txt), if it has one."""
    path = os.path.join(model_dir, VOCAB_FILE)
    return Vocab.load(path) if os.path.exists(path) else None
