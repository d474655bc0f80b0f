"""Reading a checkpoint for export: the checkpoint a path names, and its fp32 master weights
consolidated on the CPU into the model of its config.

ZeRO 1-3 through DeepSpeed's zero_to_fp32, ZeRO 0 from the model file. Peak anonymous memory is
under twice the fp32 model (measured 1.7x for ZeRO-3: the gathered weights plus gather
temporaries); the memory-mapped checkpoint pages also show in RSS but are page cache the kernel
can drop.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from txl_dist.checkpoint_names import CHECKPOINT_DIR, CLIENT_FILE, LATEST
from txl_dist.config.plan import RunPlan
from txl_dist.config.sections import RunConfig, run_config_from_dict
from txl_dist.engine.checkpoint.resume import ResumePoint, find_resume_point
from txl_dist.engine.checkpoint.state import CheckpointStateError, read_latest
from txl_dist.engine.checkpoint.store.trusted import UnsafeCheckpointError, load_trusted
from txl_dist.model import TransformerXL
from txl_dist.model.accounting import build_on_meta
from txl_dist.schema import ConfigError

MODEL_STATES = "mp_rank_00_model_states.pt"  # ZeRO 0-2: module weights (+ optimizer at stage 0)


class ExportError(Exception):
    """The checkpoint cannot be exported; the message says what is wrong and what to do."""


@dataclass
class Checkpoint:
    """A complete training checkpoint and the run config saved with it."""

    point: ResumePoint
    """Where it is and its client state (txl.json)."""
    config: RunConfig
    """The run's config as saved in txl.json."""
    plan: RunPlan
    """That config on the world size the checkpoint was saved from."""

    @property
    def path(self) -> str:
        return os.path.join(self.point.directory, self.point.tag)

    @property
    def step(self) -> int:
        return self.point.client.step

    @property
    def run_dir(self) -> str:
        """The run directory: where metrics.jsonl lies next to checkpoints/."""
        return os.path.dirname(os.path.abspath(self.point.directory))


def tag_directory(path: str) -> str:
    """The global_stepN directory a run directory, a checkpoints/ directory or a global_stepN
    directory names (a checkpoints/ directory's by its `latest`)."""
    run_checkpoints = os.path.join(path, CHECKPOINT_DIR)
    if os.path.exists(os.path.join(run_checkpoints, LATEST)):
        path = run_checkpoints
    if os.path.exists(os.path.join(path, CLIENT_FILE)):
        return path
    if not os.path.lexists(os.path.join(path, LATEST)):
        raise ExportError(
            f"{path} holds no checkpoint: pass a run directory (with checkpoints/latest), its "
            "checkpoints/ directory or a checkpoints/global_stepN directory"
        )
    try:
        tag_dir = os.path.join(path, read_latest(path))
    except (FileNotFoundError, ValueError) as err:
        raise ExportError(str(err)) from err
    if not os.path.exists(os.path.join(tag_dir, CLIENT_FILE)):
        raise ExportError(f"{tag_dir}/{CLIENT_FILE} missing: checkpoint {tag_dir} is incomplete")
    return tag_dir


def open_checkpoint(path: str) -> Checkpoint:
    """Resolve a run directory, a checkpoints/ directory or a global_stepN directory."""
    tag_dir = tag_directory(path)
    try:
        point = find_resume_point(tag_dir, out_dir=tag_dir)
    except (FileNotFoundError, CheckpointStateError, UnsafeCheckpointError) as err:
        raise ExportError(str(err)) from err
    try:
        config = run_config_from_dict(point.client.config)
        plan = config.plan(point.client.world_size)
    except ConfigError as err:
        raise ExportError(
            f"{point.directory}/{point.tag}: bad run config in txl.json: {err}"
        ) from err
    return Checkpoint(point, config, plan)


def consolidated_weights(ckpt: Checkpoint) -> dict[str, Tensor]:
    """fp32 master weights of every parameter, by state-dict name (tied names may repeat)."""
    if ckpt.config.zero_stage == 0:
        return _stage0_weights(ckpt)
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    # zero_to_fp32 reports progress on stdout; keep stdout for our own output.
    with contextlib.redirect_stdout(sys.stderr):
        lazy = get_fp32_state_dict_from_zero_checkpoint(
            ckpt.point.directory, tag=ckpt.point.tag, lazy_mode=True
        )
        # One tensor at a time: ZeRO-3 gathers each from the memory-mapped shards.
        return {name: tensor.contiguous() for name, tensor in lazy.items()}


def _stage0_weights(ckpt: Checkpoint) -> dict[str, Tensor]:
    """Without ZeRO, the module is the fp32 master, or with bf16/fp16 the optimizer holds it."""
    path = os.path.join(ckpt.path, MODEL_STATES)
    if not os.path.exists(path):
        raise ExportError(f"{path} missing: checkpoint {ckpt.point.tag} is incomplete")
    states = load_trusted(path)
    module = states["module"]
    if all(t.dtype == torch.float32 for t in module.values() if t.is_floating_point()):
        return module
    # DeepSpeed's unfused fp16/bf16 optimizer keeps one fp32 copy per parameter, in the order
    # the parameters were given to the optimizer: model.parameters(), tied ones once.
    masters = [t for group in states["optimizer"]["fp32_groups"] for t in group]
    check_layers(ckpt, module, path)
    names = [name for name, _ in build_on_meta(ckpt.config.model).named_parameters()]
    if len(masters) != len(names):
        raise ExportError(
            f"{path}: {len(masters)} fp32 master tensors for {len(names)} parameters; the "
            "checkpoint does not match its config (txl.json model section)"
        )
    weights = dict(zip(names, masters))
    for name, master in weights.items():
        # The engine's low-precision copy is the master rounded: a check of the name order.
        # (Names or shapes that differ from the config are reported by build_model.)
        saved = module.get(name)
        comparable = saved is not None and saved.shape == master.shape
        if comparable and not torch.equal(master.to(saved.dtype), saved):
            raise ExportError(f"{path}: fp32 master of {name} differs from the module weight")
    return weights


def build_model(ckpt: Checkpoint, weights: dict[str, Tensor], dtype: torch.dtype) -> TransformerXL:
    """The model of the checkpoint's config holding `weights` (cast to dtype), weights re-tied."""
    check_layers(ckpt, weights, ckpt.path)
    model = build_on_meta(ckpt.config.model)
    expected = dict(model.named_parameters())  # tied parameters under their first name
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(dict(model.named_parameters(remove_duplicate=False))))
    wrong_shape = [
        f"{name} {tuple(weights[name].shape)} vs {tuple(param.shape)}"
        for name, param in expected.items()
        if name in weights and weights[name].shape != param.shape
    ]
    if missing or unexpected or wrong_shape:
        raise ExportError(
            f"checkpoint {ckpt.path} does not match its config (txl.json model section): "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}, "
            f"shape checkpoint vs config {wrong_shape[:5]}"
        )
    for name in expected:  # one tensor at a time, so the fp32 copy can go as we cast
        weights[name] = weights[name].to(dtype)
    model.load_state_dict({k: weights[k] for k in expected}, strict=False, assign=True)
    model.tie_weights()
    return model.eval()


def check_layers(ckpt: Checkpoint, names: Iterable[str], where: str) -> None:
    """The weights' layers must be as many as txl.json's n_layer, checked before a model of
    n_layer is built (a received txl.json's 10**7 would build layers for minutes)."""
    layers = {name.split(".")[1] for name in names if name.startswith("layers.")}
    if len(layers) != ckpt.config.model.n_layer:
        raise ExportError(
            f"{where}: the weights hold {len(layers)} layers, txl.json's model section says "
            f"n_layer {ckpt.config.model.n_layer}: the checkpoint does not match its config"
        )
