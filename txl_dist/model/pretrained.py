"""An export's directory: config.json and the weights (model.safetensors or
pytorch_model.bin), and the vocabulary and README the commands add.

Written whole or not at all (`staged_directory`), read back with torch (and safetensors) only,
its files checked against each other before a model is built. `TransformerXL.save_pretrained`
and `from_pretrained` are `save_export` and `load_export` here.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from txl_dist.checkpoint_names import CHECKPOINT_DIR, CLIENT_FILE, LATEST
from txl_dist.model.config import TXLConfig
from txl_dist.model.safetensors_io import save_streaming

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
VOCAB_FILE = "vocab.txt"


def save_export(
    model: nn.Module,
    directory: str | os.PathLike,
    format: str = "safetensors",
    write_extra: Callable[[str], None] | None = None,
) -> None:
    """Write config.json and the weights (tied tensors once), replacing `directory` whole.

    Everything goes to a temporary directory beside it that is renamed into place, so a
    directory never mixes files of two exports; `write_extra(tmp)` adds files (vocabulary,
    README) before the rename.
    """
    if format not in ("safetensors", "torch"):
        raise ValueError(f"format must be 'safetensors' or 'torch', got {format!r}")
    with staged_directory(directory) as tmp:
        weights = _unaliased_state_dict(model)
        if format == "safetensors":
            save_streaming(weights, os.path.join(tmp, SAFETENSORS_FILE), {"format": "pt"})
        else:
            torch.save(weights, os.path.join(tmp, TORCH_FILE))
        with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
            json.dump(model.config.to_dict(), f, indent=2)
        if write_extra is not None:
            write_extra(tmp)


def load_export(
    model_class: Callable[..., nn.Module],
    directory: str | os.PathLike,
    map_location: str | torch.device = "cpu",
) -> nn.Module:
    """The `model_class` model `save` (or txl-export) wrote to `directory`, in eval mode.

    config.json, vocab.txt and the safetensors header are checked against each other before
    the model is built, so a mismatched or edited directory fails in well under a second.
    """
    if training_files := _training_kind(directory):
        raise FileNotFoundError(
            f"{directory} is {training_files}, not an export: turn it into one with "
            f"`txl-export {directory} EXPORT_DIR` and pass EXPORT_DIR"
        )
    config_path = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(config_path):
        raise FileNotFoundError(
            f"{config_path} not found: pass a directory that save_pretrained or txl-export wrote"
        )
    config = TXLConfig.from_dict(read_json(config_path, "model config (config.json)"))
    _check_vocab_size(directory, config)
    weights_path = _weights_path(directory)
    if weights_path.endswith(SAFETENSORS_FILE):
        _check_header_layers(weights_path, config)
    with torch.device("meta"):
        model = model_class(config, init_weights=False)
    expected = {k: tuple(v.shape) for k, v in _unaliased_state_dict(model).items()}
    weights = _load_weights(weights_path, expected, map_location)
    model.load_state_dict(weights, strict=False, assign=True)
    model.tie_weights()
    return model.eval()


def _training_kind(directory: str | os.PathLike) -> str | None:
    """What the training engine's files in `directory` are, if it holds them instead of an export
    (the engine's layout: checkpoints/latest, checkpoints/global_stepN/txl.json)."""
    if os.path.isdir(os.path.join(directory, CHECKPOINT_DIR)):
        return "a training run directory (train.out_dir)"
    if os.path.exists(os.path.join(directory, LATEST)):
        return "a training checkpoints directory"
    if os.path.exists(os.path.join(directory, CLIENT_FILE)):
        return "a training checkpoint"
    return None


@contextlib.contextmanager
def staged_directory(directory: str | os.PathLike):
    """Yield a temporary directory that replaces `directory` when the block completes.

    An existing `directory` must be empty or an earlier export (it has a config.json): we
    never delete a directory of someone else's files.
    """
    directory = os.path.abspath(directory)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise FileExistsError(f"{directory} exists and is a file; choose an empty or new directory")
    is_export = os.path.exists(os.path.join(directory, CONFIG_FILE))
    if os.path.isdir(directory) and os.listdir(directory) and not is_export:
        raise FileExistsError(
            f"{directory} exists and is not an export (no {CONFIG_FILE}); choose an empty "
            "or new directory"
        )
    parent, name = os.path.split(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = _new_directory(parent, f".{name}.tmp-")
    try:
        yield tmp
        old = None
        if os.path.exists(directory):
            old = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
            os.replace(directory, os.path.join(old, name))
        os.replace(tmp, directory)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _new_directory(parent: str, prefix: str) -> str:
    """A new empty directory in `parent` with the mode every new directory gets (0777 less the
    umask), not mkdtemp's 0700: an export is shared as the user's other files are."""
    while True:
        path = os.path.join(parent, prefix + secrets.token_hex(6))
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
            return path


def _check_vocab_size(directory, config: TXLConfig) -> None:
    """A vocab.txt beside the weights must have exactly n_token entries."""
    path = os.path.join(directory, VOCAB_FILE)
    if not os.path.exists(path):
        return
    # The lines Vocab.load reads, counted alike. From its module, not the pipeline's front door:
    # an HF export ships this module and every module it imports (txl_dist/hf/export.py).
    from data_pipeline.limits import VOCAB_BYTES
    from data_pipeline.received import read_received
    from data_pipeline.vocab import vocab_entries

    data = read_received(path, VOCAB_BYTES, "vocabulary file (vocab.txt)")
    entries = len(vocab_entries(data.decode("utf-8", errors="replace")))
    if entries != config.n_token:
        raise ValueError(
            f"{path} has {entries} entries but config.json has n_token {config.n_token}: the "
            "vocabulary is not the model's; re-export or restore the right vocab.txt"
        )


def read_json(path: str, what: str) -> Any:
    """The JSON of a file of an export, read as a received file (data_pipeline.received)."""
    from data_pipeline.limits import METADATA_BYTES
    from data_pipeline.received import read_received_text

    return json.loads(read_received_text(path, METADATA_BYTES, what))


def _weights_path(directory) -> str:
    """The one weights file of an export; two formats at once means a mixed directory."""
    found = [
        os.path.join(directory, name)
        for name in (SAFETENSORS_FILE, TORCH_FILE)
        if os.path.exists(os.path.join(directory, name))
    ]
    if len(found) != 1:
        what = "both" if found else "neither"
        raise FileNotFoundError(
            f"{directory} holds {what} {SAFETENSORS_FILE} and {TORCH_FILE}: an export has "
            "exactly one; re-export into an empty directory"
        )
    if not stat.S_ISREG(os.lstat(found[0]).st_mode):  # a link may lead anywhere, a FIFO blocks
        raise ValueError(
            f"{found[0]} is a link or not a regular file: the weights are read only as a "
            "regular file of the export; replace it with the file itself"
        )
    return found[0]


def _check_header_layers(path: str, config: TXLConfig) -> None:
    """The header's layer count must be config.json's, before a model of n_layer is built."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            names = f.keys()
    except SafetensorError as err:  # a header that does not hold (overlapping offsets, ...)
        raise ValueError(f"{path} is not a valid safetensors file ({err}); re-export") from None
    layers = {int(name.split(".")[1]) for name in names if name.startswith("layers.")}
    if len(layers) != config.n_layer:
        raise ValueError(
            f"weights in {path} do not match config.json: {len(layers)} layers, n_layer "
            f"{config.n_layer}; the config does not belong to these weights"
        )


def _aliased_names(model: nn.Module) -> set[str]:
    """Parameter names that repeat a parameter an earlier name holds (tied weights)."""
    first_names = dict(model.named_parameters())
    return {name for name, _ in model.named_parameters(remove_duplicate=False)} - set(first_names)


def _unaliased_state_dict(model: nn.Module) -> dict[str, Tensor]:
    aliases = _aliased_names(model)
    return {k: v.contiguous() for k, v in model.state_dict().items() if k not in aliases}


def _load_weights(path: str, expected: dict[str, tuple], map_location) -> dict[str, Tensor]:
    """The weights at `path`, whose names and shapes must be `expected` (checked first)."""
    if path.endswith(SAFETENSORS_FILE):
        from safetensors import safe_open

        with safe_open(path, framework="pt") as f:
            names = f.keys()
            found = {k: tuple(f.get_slice(k).get_shape()) for k in names}
            _check_names_and_shapes(path, found, expected)
            return {k: f.get_tensor(k).to(map_location) for k in names}
    try:
        weights = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:  # from None: torch's advice stays out of tracebacks
        raise ValueError(refused_pickle(path, err) + ": export the checkpoint again") from None
    _check_names_and_shapes(path, {k: tuple(v.shape) for k, v in weights.items()}, expected)
    return weights


def refused_pickle(path: str, err: pickle.UnpicklingError) -> str:
    """What torch's weights_only unpickler refused in `path`, without its advice to load the
    file with weights_only=False (which would run whatever the pickle calls)."""
    reason = re.search(r"WeightsUnpickler error: (.*?)(?: was not an allowed|\.\s|$)", str(err))
    what = reason.group(1)[:120] if reason else "not a torch.save file of tensors"
    return f"{path}: refused, its pickle holds more than tensors ({what})"


def _check_names_and_shapes(path: str, found: dict, expected: dict) -> None:
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    shapes = [
        f"{k} {found[k]} vs {expected[k]}"
        for k in expected
        if found.get(k, expected[k]) != expected[k]
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"weights in {path} do not match config.json: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, shape file vs config {shapes[:5]}"
        )
