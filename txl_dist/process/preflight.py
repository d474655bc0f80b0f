"""Checks that end a bad start in seconds, before any process group or engine exists.

A missing test split or a full disk used to surface after hours of training, at the final
evaluation or the first save. Everything here reads only small files, so every rank runs it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import torch

from data_pipeline import DataError, check_same_vocabulary, check_vocab, load_manifest, manifest_url
from txl_dist.config.sections import RunConfig
from txl_dist.schema import ConfigError


def check_before_training(config: RunConfig, needed_bytes: float) -> None:
    """Raise ConfigError naming the setting and the fix for the first problem found;
    `needed_bytes`: one checkpoint's size (engine/checkpoint/size.py estimates it; the engine
    imports this package, so the caller passes it in)."""
    check_device(config)
    check_splits(config)
    check_out_dir(config.train.out_dir, needed_bytes)


def check_device(config: RunConfig) -> None:
    """Settings that need a CUDA device have one."""
    if config.train.cuda_graphs and not torch.cuda.is_available():
        raise ConfigError(
            "train.cuda_graphs needs CUDA devices, and this machine has none; "
            "set train.cuda_graphs=false"
        )


def check_splits(config: RunConfig) -> None:
    """Every configured split of every corpus is prepared, readable and has the model's
    vocabulary; the corpora of a mix share one."""
    data = config.data
    corpora = [(c.name, c.path) for c in data.mix] if data.mix else [("", data.path)]
    for key in ("train_split", "valid_split", "test_split"):
        split = getattr(data, key)
        if split is None:
            continue
        skip = "" if key == "train_split" else f", or skip it with --set data.{key}=null"
        urls = [manifest_url(root, split) for _, root in corpora]
        try:
            manifests = [load_manifest(url, data.storage_options, data.retry()) for url in urls]
        except DataError as err:
            raise ConfigError(f"data.{key}={split}: {err}{skip}") from err
        try:  # first: corpora of two vocabularies are no matter of n_token
            check_same_vocabulary([name for name, _ in corpora], manifests)
        except DataError as err:
            raise ConfigError(str(err)) from err
        try:
            check_vocab(manifests[0], urls[0], config.model.n_token)
        except DataError as err:
            raise ConfigError(f"data.{key}={split}: {err}{skip}") from err


def check_out_dir(out_dir: str, needed_bytes: float) -> None:
    """out_dir can be created, written, and has room for one checkpoint."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as err:
        raise ConfigError(
            f"train.out_dir={out_dir} is not writable ({err.strerror}); choose another with "
            "--set train.out_dir=DIR"
        ) from err
    room = DiskRoom.of(out_dir, needed_bytes)
    if room.short:
        raise ConfigError(
            f"train.out_dir={out_dir} has too little room: {room}; free space or choose another "
            "train.out_dir"
        )


@dataclasses.dataclass(frozen=True)
class DiskRoom:
    """Free bytes where checkpoints go against one checkpoint's size: the clause that the
    start-up check and a save that ran out of space both print."""

    free: int
    """Bytes free where the checkpoint goes."""
    needed: float
    """Bytes one checkpoint needs (engine/checkpoint/size.py's estimate)."""

    @classmethod
    def of(cls, directory: str, needed_bytes: float) -> DiskRoom:
        return cls(shutil.disk_usage(directory).free, needed_bytes)

    @property
    def short(self) -> bool:
        return self.free < self.needed

    def __str__(self) -> str:
        return f"one checkpoint needs about {self.needed:,.0f} bytes, {self.free:,} are free"
