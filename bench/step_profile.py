"""What a speed row trains on, and where one of its steps spends its time.

- `corpus_tokens`: rows of real text as token ids, words ranked by their count in the text (as
  a prepared vocabulary ranks them), so the adaptive softmax sees real target frequencies and
  real document lengths. `uniform_tokens`: ids drawn uniformly, the old speed rows' targets,
  which put ~90% of them in the tail clusters where real text puts a few percent.
- `profile_step`: one step under torch's profiler: the device's busy fraction of the step's
  wall time and its busy time by category. On CUDA the categories are the GPU kernels'; on a
  CPU, the operators' own CPU time.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

CATEGORIES = (
    "attention forward",
    "attention backward",
    "matrix products",
    "softmax / cross-entropy",
    "copies",
    "index / scatter",
    "elementwise",
)
"""GPU (or CPU) time of a step by kind of work; `idle` is the rest of the wall time."""

# Substrings of kernel / operator names, checked in this order (the first match wins).
_PATTERNS = (
    (
        "attention backward",
        (
            "attentionbackward",
            "fmha_cutlassb",
            "flash_bwd",
            "_efficient_attention_backward",
            "_flash_attention_backward",
            "flex_attention_backward",
        ),
    ),  # fmt: skip
    (
        "attention forward",
        (
            "fmha",
            "attentionkernel",
            "flash_fwd",
            "_efficient_attention",
            "_flash_attention",
            "flex_attention",
            "scaled_dot_product",
        ),
    ),  # fmt: skip
    ("softmax / cross-entropy", ("softmax", "nll_loss", "cross_entropy", "logsumexp")),
    (
        "matrix products",
        (
            "gemm",
            "cutlass",
            "nvjet",
            "xmma",
            "matmul",
            "aten::mm",
            "aten::bmm",
            "aten::addmm",
            "aten::baddbmm",
            "aten::linear",
        ),
    ),  # fmt: skip
    (
        "index / scatter",
        ("index", "scatter", "gather", "embedding", "nonzero", "bincount", "sort"),
    ),  # fmt: skip
    (
        "copies",
        (
            "memcpy",
            "memset",
            "copy",
            "cat",
            "fill",
            "aten::pad",
            "constant_pad",
            "clone",
            "contiguous",
            "aten::to",
        ),
    ),  # fmt: skip
)


def category(name: str) -> str:
    """The category of a CUDA kernel or an aten operator, by its name."""
    lowered = name.lower()
    for label, patterns in _PATTERNS:
        if any(p in lowered for p in patterns):
            return label
    return "elementwise"


def corpus_tokens(raw: Path, n_token: int, rows: int, length: int) -> torch.Tensor:
    """[rows, length] ids of wiki.train.tokens in `raw`: each row a continuous stretch of text
    (a line ends in <eos>), the rows spread evenly over the file, each word's id its rank by
    count in the file (ties by first appearance), ranks past the vocabulary folded to its end."""
    words = (raw / "wiki.train.tokens").read_text(encoding="utf-8").replace("\n", " <eos> ")
    words = words.split()
    if len(words) < rows * length:
        raise ValueError(
            f"{raw}/wiki.train.tokens has {len(words)} words, fewer than {rows} rows of {length}"
        )
    rank = {word: i for i, (word, _) in enumerate(collections.Counter(words).most_common())}
    stride = len(words) // rows  # from every part of the file: ties rank early words first
    rows_of_words = (words[r * stride : r * stride + length] for r in range(rows))
    ids = [[min(rank[w], n_token - 1) for w in row] for row in rows_of_words]
    return torch.tensor(ids)


def uniform_tokens(n_token: int, rows: int, length: int) -> torch.Tensor:
    """[rows, length] ids drawn uniformly from the vocabulary (seeded)."""
    return torch.randint(0, n_token, (rows, length), generator=torch.Generator().manual_seed(0))


def profile_step(step: Callable[[], None], device: torch.device) -> tuple[float, dict[str, float]]:
    """(busy fraction, {category: ms, ..., 'idle': ms}) of one call of `step`, after two
    unprofiled calls (allocator and caches warm)."""
    for _ in range(2):
        step()
    _synchronize(device)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        step()
        _synchronize(device)
        wall_ms = (time.perf_counter() - start) * 1e3
    times = dict.fromkeys(CATEGORIES, 0.0)
    for event in prof.events():
        if cuda and event.device_type.name == "CUDA":
            times[category(event.name)] += event.device_time / 1e3
        elif not cuda and event.name.startswith("aten::"):
            times[category(event.name)] += event.self_cpu_time_total / 1e3
    busy_ms = sum(times.values())
    times["idle"] = max(0.0, wall_ms - busy_ms)
    return min(1.0, busy_ms / wall_ms), {k: round(v, 3) for k, v in times.items()}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
