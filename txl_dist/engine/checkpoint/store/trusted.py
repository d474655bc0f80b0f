"""Loading only what our own checkpoints contain: every .pt file is scanned for the globals its
pickle would call before anything unpickles it, and loads use torch's weights_only unpickler."""

from __future__ import annotations

import importlib
import os
import stat
from typing import Any

import torch

# Earlier torch releases have known bypasses of the weights_only unpickler (CVE-2025-32434
# before 2.6; CVE-2026-24747, memory corruption, before 2.10).
MIN_SAFE_TORCH = (2, 10)
# Globals outside torch's weights_only defaults that txl-dist's own checkpoints contain, listed
# from real checkpoints (DeepSpeed 0.19, torch 2.13): ZeRO 0-3, fp32 and bf16, one and two
# ranks, and their universal conversions. ZeRO 0 and the memory files hold none.
CHECKPOINT_GLOBALS = frozenset(
    {
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",
        "deepspeed.runtime.zero.config.ZeroStageEnum",
        "deepspeed.utils.tensor_fragment.fragment_address",
    }
)


class UnsafeCheckpointError(Exception):
    """A checkpoint file could run code when loaded; it is refused before anything unpickles it."""


def check_pickles(directory: str) -> None:
    """Refuse a checkpoint whose .pt files name any global outside CHECKPOINT_GLOBALS.

    torch's scanner reads the pickle opcodes without running them (and rejects opcodes it does
    not know), so this is safe on any file; DeepSpeed's loaders, which unpickle with
    weights_only=False, run only on directories that passed.
    """
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) < MIN_SAFE_TORCH:
        raise UnsafeCheckpointError(
            f"torch {torch.__version__} has known ways around its safe unpickler; loading "
            f"checkpoints needs torch>={'.'.join(map(str, MIN_SAFE_TORCH))}"
        )
    for path in _pickle_files(directory):
        try:
            unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        except Exception as err:  # noqa: BLE001 - anything the scanner cannot read is refused
            raise UnsafeCheckpointError(
                f"{path}: refused, not a torch.save file that can be checked without running it "
                f"({type(err).__name__}: {err})"
            ) from err
        unsafe -= CHECKPOINT_GLOBALS
        if unsafe:
            raise UnsafeCheckpointError(
                f"{path}: refused, its pickle calls {sorted(unsafe)[0]}, which txl-dist "
                "checkpoints never contain; load only checkpoints of your own runs (share exports)"
            )


def _pickle_files(directory: str):
    """Every .pt file under `directory`; a link or a special file anywhere under it is refused
    (our checkpoints hold neither: a link may lead anywhere, / included, and a FIFO blocks
    whoever opens it)."""
    for root, dirs, files in os.walk(directory, onerror=_unreadable):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = "a link" if stat.S_ISLNK(mode) else "a special file (FIFO, device, socket)"
                raise UnsafeCheckpointError(
                    f"{path}: refused, {kind} in a checkpoint, which txl-dist never writes; "
                    "replace it with the file itself"
                )
        yield from sorted(os.path.join(root, name) for name in files if name.endswith(".pt"))


def _unreadable(err: OSError) -> None:
    raise UnsafeCheckpointError(f"{err.filename}: refused, cannot be listed ({err.strerror})")


def load_trusted(path: str) -> Any:
    """torch.load with the weights_only unpickler, allowing the globals our checkpoints hold."""
    allowed = [_resolve(name) for name in sorted(CHECKPOINT_GLOBALS)]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def _resolve(qualified: str) -> Any:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)
