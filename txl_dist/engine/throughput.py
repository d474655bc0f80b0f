"""How fast training goes against what the hardware allows: tokens/s and MFU of the whole job,
the known peaks of common accelerators, and the peak memory a rank used."""

from __future__ import annotations

import dataclasses

import torch

from txl_dist.model.accounting import train_flops_per_token
from txl_dist.model.config import TXLConfig
from txl_dist.process import resident

# Peak dense TFLOP/s of common accelerators by their exact CUDA device name, for MFU when
# train.peak_tflops is not set: (bf16 / fp16 tensor cores, plain fp32), from NVIDIA's datasheets.
# Exact names: the PCIe and NVL cards of a family are slower than its SXM one. fp32 runs use the
# fp32 peak (torch's float32 matmuls do not use TF32 unless asked to).
_PEAKS = [
    ((989.0, 67.0), ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]),
    ((835.0, 60.0), ["NVIDIA H200 NVL", "NVIDIA H100 NVL"]),
    ((756.0, 51.0), ["NVIDIA H100 PCIe"]),
    ((312.0, 19.5), ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe",
                     "NVIDIA A100-PCIE-40GB"]),
    ((362.0, 91.6), ["NVIDIA L40S"]),
    ((181.0, 90.5), ["NVIDIA L40"]),
    ((121.0, 30.3), ["NVIDIA L4"]),
    ((125.0, 31.2), ["NVIDIA A10"]),
    ((125.0, 15.7), ["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"]),  # fp16: V100 has no bf16
    ((112.0, 14.0), ["Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"]),
]  # fmt: skip
PEAK_TFLOPS = {name: peaks for peaks, names in _PEAKS for name in names}


def device_peak_tflops(device: torch.device, low_precision: bool) -> float | None:
    """The device's known dense peak for bf16 / fp16 (low_precision) or fp32; None if unknown."""
    if device.type != "cuda":
        return None
    return peak_tflops_of(torch.cuda.get_device_name(device), low_precision)


def peak_tflops_of(device_name: str, low_precision: bool) -> float | None:
    peaks = PEAK_TFLOPS.get(device_name)
    return None if peaks is None else peaks[0 if low_precision else 1]


@dataclasses.dataclass
class Throughput:
    """Tokens/s and model FLOP utilisation of the whole job, from timed windows of steps."""

    train_flops_per_token: float
    """The model's forward + backward FLOPs per token."""
    peak_flops: float | None
    """Peak FLOP/s of the whole job (all ranks), None when unknown (no MFU then)."""

    @classmethod
    def of(
        cls,
        model: TXLConfig,
        peak_tflops: float | None,
        device: torch.device,
        ranks: int,
        micro_rows: int,
        low_precision: bool,
    ) -> Throughput:
        """`peak_tflops` per device, or the device's known peak for the run's precision;
        `micro_rows` rows a forward."""
        peak = peak_tflops or device_peak_tflops(device, low_precision)
        flops = train_flops_per_token(model, micro_rows)
        return cls(flops, peak * 1e12 * ranks if peak else None)

    def mfu(self, tokens_per_s: float) -> float | None:
        """Achieved over peak FLOP/s, for `tokens_per_s` trained by the whole job."""
        if self.peak_flops is None:
            return None
        return self.train_flops_per_token * tokens_per_s / self.peak_flops


def memory_gib(device: torch.device) -> float:
    """Peak accelerator memory, or this process's peak resident memory on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resident.peak_bytes() / 2**30
