"""CUDA graphs of the decoder layers: what a graph captures computes the model's layers, and
every call but a training one with full memory on CUDA runs eagerly (no device here)."""

from __future__ import annotations

import torch

from txl_dist.engine.graphs import LayerStack, graph_layers
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.transformer import segment_constants

CONFIG = dict(n_token=40, n_layer=3, n_head=2, d_model=8, d_head=4, d_inner=16, dropout=0.0)


def model() -> TransformerXL:
    torch.manual_seed(0)
    return TransformerXL(TXLConfig(**CONFIG, tgt_len=4, mem_len=5)).train()


def test_the_captured_stack_gives_the_layers_output_and_each_later_layers_input():
    net = model()
    h, mems = torch.randn(2, 4, 8), [torch.randn(2, 5, 8) for _ in range(3)]
    mask, pos_enc = segment_constants(4, 5, 5, False, -1, 8, torch.float32, torch.device("cpu"))
    out, inputs = net.run_layers(h, mems, pos_enc, mask)
    stacked, *later = LayerStack(net)(h, pos_enc, mask, *mems)
    assert torch.equal(stacked, out)
    assert len(later) == 2 and all(torch.equal(a, b) for a, b in zip(later, inputs[1:]))


def test_off_cuda_a_graphed_model_runs_eagerly_as_before():
    plain, graphed = model(), model()
    graph_layers(graphed)
    tokens = torch.randint(0, 40, (2, 4))
    mems = plain(tokens, tokens).mems  # full: mem_len 5 of 4 + 4
    mems = plain(tokens, tokens, mems).mems
    expected = plain(tokens, tokens, mems).loss
    assert torch.equal(graphed(tokens, tokens, mems).loss, expected)
    assert graphed.graphed_layers.graphed is None  # nothing captured
