"""The fast CUDA path's levers, each timed off and on in one process (the GPU check's A/B part).

A lever is a switch a user has (a config key, or a model constant where the change is exact
and has no reason to be off) and a way to build one training step with it off or on. Every
other lever stays as shipped, so each ratio is that lever's own gain on today's code.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import torch

from txl_dist.engine.build import compile_layers
from txl_dist.engine.graphs import graph_layers
from txl_dist.model import TransformerXL

Step = Callable[[], torch.Tensor]
StepFactory = Callable[[TransformerXL, torch.Tensor, bool], Step]
"""(bf16 model, tokens on its device, on) -> one forward + backward continuing its memory,
returning the step's mean loss (detached)."""


@dataclasses.dataclass(frozen=True)
class Lever:
    """One speed lever and how to time it."""

    name: str
    """What it does, in a few words."""
    switch: str
    """Where a user turns it on or off."""
    step: StepFactory
    """Builds a training step with the lever off or on."""


def _config_lever(key: str, on_value, off_value) -> StepFactory:
    """A lever that is a key of the model config: the model built again with the key's value,
    the same weights, dtype and device."""

    def factory(model: TransformerXL, tokens: torch.Tensor, on: bool) -> Step:
        config = dataclasses.replace(model.config, **{key: on_value if on else off_value})
        param = next(model.parameters())
        rebuilt = TransformerXL(config, init_weights=False).to(param.device, param.dtype)
        rebuilt.load_state_dict(model.state_dict())
        return plain_step(rebuilt.train(model.training), tokens)

    return factory


def _host_sizes(model: TransformerXL, tokens: torch.Tensor, on: bool) -> Step:
    return plain_step(model, tokens, host_sizes=on)


def _compiled(model: TransformerXL, tokens: torch.Tensor, on: bool) -> Step:
    if not on:
        return plain_step(model, tokens)
    compiled = copy.deepcopy(model)
    compile_layers(compiled)
    return plain_step(compiled, tokens)


def _cuda_graphs(model: TransformerXL, tokens: torch.Tensor, on: bool) -> Step:
    if not on:
        return plain_step(model, tokens)
    graphed = copy.deepcopy(model)
    graph_layers(graphed)
    return plain_step(graphed, tokens)


def _graphs_of_compiled(model: TransformerXL, tokens: torch.Tensor, on: bool) -> Step:
    compiled = copy.deepcopy(model)
    compile_layers(compiled)
    if on:
        graph_layers(compiled)
    return plain_step(compiled, tokens)


LEVERS = (
    Lever(
        "position product in aligned rows",
        "model.position_row_multiple (exact; 1 = K + 1 rows)",
        _config_lever("position_row_multiple", 8, 1),
    ),
    Lever(
        "d_model and d_inner padded to aligned widths",
        "model.width_multiple (exact, CUDA; 8 pads, 1 = as configured)",
        _config_lever("width_multiple", 8, 1),
    ),
    Lever(
        "fused relative-attention kernel (Triton)",
        "model.fused_kernel (exact up to accumulation order; off by default)",
        _config_lever("fused_kernel", True, False),
    ),
    Lever(
        "cluster sizes from the host",
        "model(..., cluster_sizes=model.cluster_sizes(targets)) (exact; the loop does it)",
        _host_sizes,
    ),
    Lever("compiled layers", "train.compile", _compiled),
    Lever("CUDA graphs of the layers", "train.cuda_graphs", _cuda_graphs),
    Lever(
        "CUDA graphs of compiled layers, against compiled",
        "train.cuda_graphs with train.compile",
        _graphs_of_compiled,
    ),
)


def plain_step(model: TransformerXL, tokens: torch.Tensor, host_sizes: bool = True) -> Step:
    """One forward + backward of `tokens` (on the model's device) continuing the previous
    call's memory; the softmax's cluster sizes counted on the host, as training does."""
    state = {"mems": None}
    sizes = model.cluster_sizes(tokens[:, 1:].cpu()) if host_sizes else None

    def step():
        out = model(tokens[:, :-1], tokens[:, 1:], state["mems"], cluster_sizes=sizes)
        loss = out.loss.float().mean()
        loss.backward()
        state["mems"] = out.mems
        model.zero_grad(set_to_none=True)
        return loss.detach()

    return step
