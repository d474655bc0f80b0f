import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# Triton kernels run in Triton's interpreter: the suite's machines have no GPU. Set before any
# test module imports a kernel, since triton.jit chooses at decoration.
os.environ.setdefault("TRITON_INTERPRET", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real corpora in ../shared/data (override with TXL_SHARED_DATA)."""
    path = Path(os.environ.get("TXL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not (path / "SOURCES.md").exists():
        pytest.fail(f"shared data not found at {path}: set TXL_SHARED_DATA to ../shared/data")
    return path


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> None:
    """torch computes on one thread in the test process. The suite's machines have two cores,
    shared with a test's children (started beside the test process) and often with other jobs:
    a second thread then mostly waits for a core, and the tensors computed here are too small to
    gain from it (on the shared 2-core VM, 2026-12-06, the not-slow tests that compute here took
    143 s, 81 s of CPU, on one thread against 521 s, 204 s on two). Children keep torch's
    default: the thread tests and the training runs choose their own."""
    torch.set_num_threads(1)


SLOW_DIRS = ("integration", "slurm")  # real multi-process runs: minutes each


def pytest_collection_modifyitems(config, items):
    """Mark the multi-process runs slow: `pytest -m "not slow"` is the few-minute subset."""
    for item in items:
        if any(part in SLOW_DIRS for part in item.path.relative_to(REPO_ROOT).parts[1:2]):
            item.add_marker(pytest.mark.slow)


@contextlib.contextmanager
def small_disk(path: Path, size: int) -> Iterator[Path]:
    """A tmpfs of `size` bytes at `path`, unmounted when the block exits however it exits.

    Mounting needs root (CI runs as root); elsewhere the test is skipped, saying so.
    """
    if os.geteuid() != 0:
        pytest.skip("a full disk is a small tmpfs here, and mounting one needs root")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
    try:
        yield path
    finally:  # lazily: a process still holding a file there must not keep it mounted
        subprocess.run(["umount", "--lazy", path], check=True)
