"""`train.init_from`: a new run's weights from an export or a checkpoint (continued pretraining).

The source is checked before any process group (same architecture, same vocabulary) and its
weights are copied into the freshly built model in place of the seed's initial ones; the
optimizer, schedule and data position start fresh. A resume of the run's own checkpoint wins:
init_from only seeds step 0.

Architecture is what decides the parameters and what they mean (ARCHITECTURE_FIELDS); the
lengths (tgt_len, mem_len, clamp_len, same_length, eval_*), dropout and the init std are
training choices a continued run may change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

import fsspec
import torch
from torch import nn

from data_pipeline import DataError, load_manifest, manifest_url, redact_text
from txl_dist.checkpoint_names import CHECKPOINT_DIR, CLIENT_FILE, LATEST
from txl_dist.config.sections import RunConfig
from txl_dist.engine.checkpoint.consolidate import (
    Checkpoint,
    ExportError,
    build_model,
    consolidated_weights,
    open_checkpoint,
    tag_directory,
)
from txl_dist.exports.loading import export_vocabulary
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.pretrained import CONFIG_FILE, read_json
from txl_dist.schema import ConfigError

log = logging.getLogger(__name__)

ARCHITECTURE_FIELDS = (
    "n_token",
    "n_layer",
    "n_head",
    "d_model",
    "d_head",
    "d_inner",
    "d_embed",
    "cutoffs",
    "div_val",
    "tie_weight",
    "tie_projs",
    "pre_lnorm",
)
"""The model fields a source must share with the run: its parameters' shapes, ties and order."""

Gather = Callable[[list[nn.Parameter]], Any]


@dataclasses.dataclass
class InitSource:
    """Where a run's first weights come from, read without its weights."""

    path: str
    """The path given (train.init_from)."""
    kind: str
    """export or checkpoint."""
    model: TXLConfig
    """Its model config."""
    vocab_sha256: str
    """sha256 of the vocabulary or tokenizer it was trained with."""
    directory: str
    """The export's or checkpoint's directory as opened when it was checked (bound()): what
    its weights are loaded from."""
    shown: str
    """That directory by its path, for messages."""
    checkpoint: Checkpoint | None = None
    """The checkpoint, for kind checkpoint (read through `directory`)."""

    def describe(self) -> str:
        """What the run was initialized from, for the log, the record and export READMEs."""
        if self.checkpoint is None:
            return f"export {redact_text(self.path)}"
        run = self.checkpoint.point.client.run_id
        return f"checkpoint {self.shown} (run {run}, step {self.checkpoint.step})"


def bound(path: str) -> str:
    """/proc/self/fd/N of the directory `path` names now, held open for the process: a source
    is checked and loaded through it, so both read the same directory whatever `path` names
    in between (a link swapped after the vocabulary check)."""
    return f"/proc/self/fd/{os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)}"


def open_source(path: str) -> InitSource:
    """The export or checkpoint at `path` (a run directory, checkpoints/ or global_stepN),
    its config and vocabulary hash read; ConfigError in one line if it is neither."""
    protocol, local = fsspec.core.split_protocol(path)
    if protocol not in (None, "file", "local"):
        raise ConfigError(
            f"train.init_from={redact_text(path)} is remote ({protocol}://); init_from reads a "
            "local path only: copy the export or checkpoint to local storage and name that"
        )
    local = os.path.expanduser(local)
    try:
        directory = bound(local)
    except OSError as err:
        shown = redact_text(path)
        raise ConfigError(f"train.init_from={shown}: not a directory ({err.strerror})") from None
    # A run directory holds a config.json too (the run config): the checkpoint layout first.
    training = (os.path.join(CHECKPOINT_DIR, LATEST), LATEST, CLIENT_FILE)
    is_training = any(os.path.exists(os.path.join(directory, name)) for name in training)
    if not is_training and os.path.exists(os.path.join(directory, CONFIG_FILE)):
        return _export_source(path, directory, local)
    try:
        tag_dir = tag_directory(directory)
        ckpt = open_checkpoint(bound(tag_dir))
    except ExportError as err:  # it names the local part: a file URL's user-info and query kept
        shown = redact_text(path)
        raise ConfigError(
            f"train.init_from={shown}: neither an export (no {CONFIG_FILE}) nor a checkpoint: "
            f"{str(err).replace(directory, local).replace(local, shown)}"
        ) from err
    shown = os.path.normpath(tag_dir.replace(directory, local, 1))
    model, sha = ckpt.config.model, ckpt.point.client.vocab_sha256
    return InitSource(path, "checkpoint", model, sha, ckpt.path, shown, checkpoint=ckpt)


def _export_source(path: str, directory: str, local: str) -> InitSource:
    try:
        values = read_json(os.path.join(directory, CONFIG_FILE), "model config (config.json)")
    except (ValueError, OSError) as err:
        message = str(err).replace(directory, local)
        raise ConfigError(f"train.init_from={path}: not a readable export: {message}") from err
    if isinstance(values, dict) and "auto_map" in values:
        raise ConfigError(
            f"train.init_from={path} is a Hugging Face export (txl-export --format hf); "
            "init_from reads txl-export's safetensors or torch format: export the "
            "checkpoint again without --format hf, or name the checkpoint itself"
        )
    try:
        model = TXLConfig.from_dict(values)
        vocabulary = export_vocabulary(directory)
    except (ValueError, DataError, OSError) as err:
        message = str(err).replace(directory, local)
        raise ConfigError(f"train.init_from={path}: not a readable export: {message}") from err
    if vocabulary is None:
        raise ConfigError(
            f"train.init_from={path}: the export has no vocab.txt or tokenizer.json to check "
            "this run's data against; export the checkpoint again with txl-export"
        )
    return InitSource(path, "export", model, vocabulary.sha256, directory, local)


def architecture_differences(source: TXLConfig, run: TXLConfig) -> list[str]:
    """`field source vs run` for every architecture field that differs."""
    return [
        f"{name} {getattr(source, name)} vs {getattr(run, name)}"
        for name in ARCHITECTURE_FIELDS
        if getattr(source, name) != getattr(run, name)
    ]


def check_source(source: InitSource, config: RunConfig) -> None:
    """ConfigError in one line if the source's architecture or vocabulary is not this run's."""
    if differences := architecture_differences(source.model, config.model):
        raise ConfigError(
            f"train.init_from={source.path} has another architecture than this run's model "
            f"section ({source.kind} vs run: {'; '.join(differences)}); set the model section "
            "to the source's, or start without train.init_from"
        )
    data = config.data
    url = manifest_url(data.root, data.train_split)
    try:
        run_sha = load_manifest(url, data.storage_options, data.retry()).vocab_sha256
    except DataError as err:
        raise ConfigError(f"data.train_split={data.train_split}: {err}") from err
    if source.vocab_sha256 != run_sha:
        raise ConfigError(
            f"train.init_from={source.path} was trained with vocabulary sha256 "
            f"{source.vocab_sha256[:12]}, this run's data ({data.root}) has {run_sha[:12]}: "
            "prepare the data with the source's vocabulary (txl-prepare --vocab FILE) or "
            "tokenizer (--tokenizer FILE), or start without train.init_from"
        )


def checked_source(config: RunConfig) -> InitSource | None:
    """The run's train.init_from opened and checked (None without one)."""
    if config.train.init_from is None:
        return None
    source = open_source(config.train.init_from)
    check_source(source, config)
    return source


def source_model(source: InitSource) -> TransformerXL:
    """The source's model in fp32 on the CPU: an export's weights, or a checkpoint's fp32
    master weights consolidated from any ZeRO stage."""
    if source.checkpoint is None:
        return TransformerXL.from_pretrained(source.directory).float()
    ckpt = source.checkpoint
    return build_model(ckpt, consolidated_weights(ckpt), torch.float32)


def copy_weights(
    model: nn.Module, source: nn.Module | None, gathered: Gather | None = None
) -> None:
    """Every parameter of `model` set to the same-named one of `source`, module by module in
    the same order on every rank; `gathered(params)` makes ZeRO-3's partitioned parameters
    whole while they are written (as model.init_weights). Under ZeRO-3 only the gathers'
    modifier rank (0) needs the source, whose values the gathers hand to every rank: the
    others pass None and take part in the same gathers."""
    gathered = gathered or (lambda params: contextlib.nullcontext())
    weights = None if source is None else dict(source.named_parameters())
    names = {id(param): name for name, param in model.named_parameters()}  # tied ones once
    done: set[int] = set()
    for module in model.modules():
        params = [p for p in module.parameters(recurse=False) if id(p) not in done]
        if not params:
            continue
        done.update(id(p) for p in params)
        with gathered(params), torch.no_grad():
            for param in params if weights is not None else ():
                weight = weights[names[id(param)]]
                if weight.shape != param.shape:
                    raise ValueError(
                        f"train.init_from: {names[id(param)]} has shape {tuple(weight.shape)}, "
                        f"the model's is {tuple(param.shape)}"
                    )
                param.copy_(weight)
