"""Write a safetensors file one tensor at a time.

`safetensors.torch.save_file` first copies every tensor into Python bytes, so saving needs a
second full copy of the model in memory; exporting a large model must not. The format is small:
an 8-byte little-endian header length, a JSON header of dtypes, shapes and byte offsets, then
the raw little-endian tensor bytes. Reading stays with the safetensors library.
"""

from __future__ import annotations

import json
import struct

import torch
from torch import Tensor

DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def save_streaming(tensors: dict[str, Tensor], path: str, metadata: dict[str, str]) -> None:
    """Write `tensors` (CPU) to `path` in the safetensors format without copying them whole."""
    header: dict[str, dict] = {"__metadata__": metadata}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for tensor in tensors.values():
            # A uint8 view of the tensor's own memory: no copy beyond one tensor's contiguous().
            f.write(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().data)
