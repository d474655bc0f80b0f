"""CUDA graphs of the decoder layers (train.cuda_graphs): one replay instead of ~100 kernel
launches per layer from Python, forward and backward.

A model of `wt103_base`'s width keeps an H100 busy a third of a step: the host, launching each
kernel, is the bottleneck (docs/gpus.md). The layers of a training step have one shape once
the memory is full ([rows, mem_len + tgt_len] context), so their forward and backward are
captured once (`torch.cuda.make_graphed_callables`, which also makes dropout's random numbers
graph-safe) and replayed every step; every other shape (the first segments while the memory
fills, evaluation, generation) runs eagerly. The embedding, the adaptive softmax (whose cluster
sizes change with every batch) and the memory update stay eager.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from txl_dist.model import TransformerXL


class LayerStack(nn.Module):
    """The decoder layers as one callable of tensors, what a graph captures: (h, positional
    encodings, mask, *memories) -> (output, the input of every layer but the first)."""

    def __init__(self, model: TransformerXL):
        super().__init__()
        self.layers = model.layers
        self.r_w_bias, self.r_r_bias = model.r_w_bias, model.r_r_bias

    def forward(self, h: Tensor, pos_enc: Tensor, mask: Tensor, *mems: Tensor) -> tuple:
        inputs = []
        for layer, mem in zip(self.layers, mems):
            inputs.append(h.detach())  # for the memory update only: no gradient flows back
            h = layer(h, mem, pos_enc, self.r_w_bias, self.r_r_bias, mask)
        return (h, *inputs[1:])


class GraphedLayers:
    """Runs `model`'s layers for `TransformerXL.run_layers`: replayed graphs for the training
    shape, captured at its first step; None from `maybe_run` for any other call."""

    def __init__(self, model: TransformerXL):
        self.model = model
        self.graphed: nn.Module | None = None
        self.shapes: list[torch.Size] | None = None

    def maybe_run(
        self, h: Tensor, mems: list[Tensor], pos_enc: Tensor, mask: Tensor
    ) -> tuple[Tensor, list[Tensor]] | None:
        """(output, each layer's input) from the graphs, or None: run eagerly."""
        if not self._training_shape(h, mems):
            return None
        args = (h, pos_enc, mask, *mems)
        if self.graphed is None:
            self._capture(args)
        if [t.shape for t in args] != self.shapes:
            return None
        out, *inputs = self.graphed(*args)
        return out, [h.detach(), *inputs]

    def _training_shape(self, h: Tensor, mems: list[Tensor]) -> bool:
        """A training forward with full memory on a CUDA device."""
        full = bool(mems) and mems[0].size(1) == self.model.config.mem_len
        return full and self.model.training and torch.is_grad_enabled() and h.is_cuda

    def _capture(self, args: tuple[Tensor, ...]) -> None:
        stack = LayerStack(self.model)
        # The graph's gradients live in its own static buffers, which autograd would adopt as
        # .grad and the next replay overwrite (wrong under gradient accumulation): a copy each.
        for param in stack.parameters():
            param.register_hook(torch.clone)
        samples = tuple(t.detach().clone().requires_grad_(t.requires_grad) for t in args)
        self.graphed = torch.cuda.make_graphed_callables(stack, samples)
        self.shapes = [t.shape for t in args]


def graph_layers(model: TransformerXL) -> None:
    """Make `model` run its training-shape layers as CUDA graphs (train.cuda_graphs)."""
    model.graphed_layers = GraphedLayers(model)
