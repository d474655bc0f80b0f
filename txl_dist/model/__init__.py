"""Transformer-XL (Dai et al., 2019) in plain PyTorch: importing this needs torch only.

- config.py: `TXLConfig`; transformer.py: the language model; pretrained.py: its export directory;
- attention.py: relative multi-head attention; rel_attention_kernel.py: its fused Triton kernel;
- adaptive.py: adaptive input and softmax; dropout.py: CPU dropout masks; widths.py: padded
  widths for a GPU's kernels;
- accounting.py: parameters, FLOPs and memory of a config; safetensors_io.py: streamed saves.
"""

from txl_dist.model.config import TXLConfig
from txl_dist.model.transformer import TransformerXL, TXLOutput

__all__ = ["TXLConfig", "TransformerXL", "TXLOutput"]
