"""The model as a run builds it (ZeRO-3 partitioned, its initial weights, its decoder layers
recomputed, compiled or graphed as train asks) and the evaluator of whole splits.
"""

from __future__ import annotations

import deepspeed
import torch

from txl_dist.config.sections import RunConfig, TrainConfig
from txl_dist.engine.graphs import graph_layers
from txl_dist.engine.init_from import InitSource, copy_weights, source_model
from txl_dist.model import TransformerXL


def build_model(
    config: RunConfig, ds_config: dict, source: InitSource | None = None
) -> TransformerXL:
    """The model with its initial weights from train.seed, or `source`'s (train.init_from),
    the same on every rank and stage.

    Under ZeRO-3 it is built inside `deepspeed.zero.Init`: each module is partitioned as soon
    as it exists and initialised through a gather, so no rank ever holds the whole model. A
    source's weights are read whole in fp32 on the CPU, then copied in: on every rank, or under
    ZeRO-3 on rank 0 alone, the gathers' modifier, whose values they hand to the others.
    """
    if config.zero_stage == 3:
        with deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = TransformerXL(config.model, init_weights=False)
        # Parameters appended to a ParameterList after its __init__ (the adaptive projections)
        # escape the context; partition them too.
        deepspeed.zero.Init(module=model, config_dict_or_path=ds_config)

        def gathered(params):
            return deepspeed.zero.GatheredParameters(params, modifier_rank=0)
    else:
        model, gathered = TransformerXL(config.model, init_weights=False), None
    torch.manual_seed(config.train.seed)
    if source is None:
        model.init_weights(gathered)
    else:
        reads = gathered is None or torch.distributed.get_rank() == 0
        copy_weights(model, source_model(source) if reads else None, gathered)
    return model


def wrap_layers(model: TransformerXL, train: TrainConfig) -> None:
    """The decoder layers as `train` asks: recomputed in backward, compiled, graphed."""
    if train.activation_checkpointing:
        _checkpoint_layers(model)
    if train.compile:
        compile_layers(model)
    if train.cuda_graphs:  # preflight made sure the devices are CUDA's
        graph_layers(model)


def _checkpoint_layers(model: TransformerXL) -> None:
    """Recompute each decoder layer in backward instead of storing its activations."""
    from torch.utils.checkpoint import checkpoint as recompute

    for layer in model.layers:
        forward = layer.forward
        layer.forward = lambda *args, _f=forward: recompute(_f, *args, use_reentrant=False)


def compile_layers(model: TransformerXL) -> None:
    """torch.compile each decoder layer in place, so state-dict names (checkpoints) are unchanged.

    Per layer, not the whole model: the adaptive softmax's per-cluster gathers have data-dependent
    shapes that would break the graph every step. The layers share one code object, so all of
    them reuse the same few graphs: one per memory length a run sees (0 on a row's first segment,
    then mem_len; evaluation adds its own lengths and rows), each compiled once.
    """
    for layer in model.layers:
        layer.compile(dynamic=False)
