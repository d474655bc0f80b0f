"""A small model whose memory outlasts every text the evaluation tests score, so scoring it
segment by segment gives what one pass over the text gives."""

from __future__ import annotations

import pytest
import torch

from txl_dist.model import TransformerXL, TXLConfig

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model() -> TransformerXL:
    """Segments of 4 tokens and a memory longer than any text here: every token sees it all."""
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=40, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32, tgt_len=4,
        mem_len=32, dropout=0.0, init_std=0.3,
    )  # fmt: skip
    return TransformerXL(config).eval()


def whole(model: TransformerXL, ids: list[int]) -> torch.Tensor:
    """Each token's loss after all the ids before it, in one pass without memory."""
    ids_t = torch.tensor([ids])
    with torch.no_grad():
        return model(ids_t[:, :-1], ids_t[:, 1:]).loss[0].double()
