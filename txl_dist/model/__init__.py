"""Transformer-XL (Dai et al., 2019) in plain PyTorch: importing this needs torch only."""

from txl_dist.model.config import TXLConfig
from txl_dist.model.transformer import TransformerXL, TXLOutput

__all__ = ["TXLConfig", "TransformerXL", "TXLOutput"]
