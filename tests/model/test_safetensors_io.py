import pytest
import torch
from safetensors.torch import load_file

from txl_dist.model.safetensors_io import save_streaming


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_streamed_safetensors_round_trip_every_dtype(tmp_path, dtype):
    tensors = {
        "a": torch.randn(3, 5).to(dtype),
        "b": torch.arange(7),
        "c": torch.randn(2).to(dtype),
    }
    save_streaming(tensors, str(tmp_path / "x.safetensors"), {"format": "pt"})
    loaded = load_file(tmp_path / "x.safetensors")
    assert loaded.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor)
