"""launch/install.sh's environment is launch/requirements.lock's, every file hash-checked."""

from __future__ import annotations

import os
import re
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO_ROOT

LOCK = REPO_ROOT / "launch" / "requirements.lock"
ENTRY_START = re.compile(r"^(?=[^\s#])", re.MULTILINE)  # an entry's line starts in column 0
PIN = re.compile(r"([a-z0-9._-]+)==(\S+) \\\n")  # the first line of every entry
HASH = re.compile(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$", re.MULTILINE)
PROJECT = "txl-dist"


TOOLS_LOCK = REPO_ROOT / "launch" / "pip-tools.lock"


def entries(lock: Path = LOCK) -> list[str]:
    """A lock's entries: a name==version line and the indented lines under it."""
    return [entry for entry in ENTRY_START.split(lock.read_text()) if not entry.startswith("#")]


def pins(lock: Path = LOCK) -> dict[str, str]:
    return dict(PIN.match(entry).groups() for entry in entries(lock))


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize(
    "lock, most, needed",
    [
        (LOCK, None, {"torch", "deepspeed", "setuptools", "pip", "pytest"}),
        (TOOLS_LOCK, 12, {"pip-tools", "build", "click", "pip", "setuptools", "wheel"}),
    ],
)
def test_every_entry_of_a_lock_is_pinned_and_hashed(lock, most, needed):
    locked = entries(lock)
    assert len(locked) > 100 if most is None else len(locked) <= most
    unpinned = [entry.split("\n")[0] for entry in locked if not PIN.match(entry)]
    assert not unpinned, f"not a 'name==version \\' line: {unpinned}"
    unhashed = [entry.split(" ")[0] for entry in locked if not HASH.search(entry)]
    assert not unhashed, f"entries without a --hash: {unhashed}"
    assert needed <= pins(lock).keys()


def offline_index(tmp_path: Path, forged: list[str]) -> dict[str, str]:
    """pip's environment offering only forged files (empty zip archives) of these names."""
    offered = tmp_path / "offered"
    offered.mkdir()
    for name in forged:
        (offered / name).write_bytes(b"PK\x05\x06" + bytes(18))
    return {
        "PIP_CONFIG_FILE": os.devnull,  # no index, find-links or constraint of the machine's
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(offered),
    }


def test_the_environment_is_the_lock():
    """Every distribution of the suite's environment is in the lock at its version, and the
    other way round: a package installed or upgraded by hand fails here."""
    site_packages = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    installed = {
        normalized(dist.metadata["Name"]): dist.version
        for dist in metadata.distributions(path=sorted(site_packages))
    }
    installed.pop(PROJECT)
    locked = pins()
    if installed.get("torch") != locked["torch"]:
        pytest.skip(f"torch {installed.get('torch')} is not the lock's: installed by TORCH_SPEC")
    differing = {
        name: (locked.get(name), installed.get(name))
        for name in locked.keys() | installed.keys()
        if locked.get(name) != installed.get(name)
    }
    assert not differing, f"(locked, installed): {differing}; rerun bash launch/install.sh"


@pytest.fixture(scope="module")
def forged(tmp_path_factory) -> dict:
    """install.sh offered a forged file of pip, the first package it installs, and
    update_lock.sh offered forged files of pip-tools and its dependencies, both run at once (each
    first makes a virtual environment: seconds of one core). How each ended, what was forged,
    install.sh's venv and the lock's bytes before."""
    root = tmp_path_factory.mktemp("forged")
    pip_file = f"pip-{pins()['pip']}-py3-none-any.whl"
    tools = [
        f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        for name, version in pins(TOOLS_LOCK).items()
    ]
    (root / "install").mkdir()
    (root / "update_lock").mkdir()
    venv, before = root / "venv", LOCK.read_bytes()
    install, update_lock = processes.run_at_once(
        [
            ["bash", REPO_ROOT / "launch" / "install.sh"],
            ["bash", REPO_ROOT / "launch" / "update_lock.sh", "--no-upgrade"],
        ],
        120,
        [
            {**os.environ, **offline_index(root / "install", [pip_file]), "VENV": str(venv)},
            {**os.environ, **offline_index(root / "update_lock", tools)},
        ],
    )
    return dict(install=install, update_lock=update_lock, pip_file=pip_file, venv=venv,
                lock_before=before)  # fmt: skip


def test_install_refuses_a_download_whose_hash_is_not_the_locks(forged):
    """The first package install.sh installs, pip itself, offered as a forged file of the lock's
    name and version: pip refuses it and the install stops, leaving the venv's own pip."""
    result = forged["install"]
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-2000:]
    assert forged["pip_file"] in result.stderr
    assert "installed into" not in result.stdout
    pip_left = processes.run([forged["venv"] / "bin" / "python", "-m", "pip", "--version"], 60)
    assert pip_left.stdout.split()[1] != pins()["pip"]


def test_the_lock_tool_is_installed_from_its_own_hashed_lock(forged):
    """update_lock.sh offered forged files of pip-tools and its dependencies: pip refuses them
    by the hashes of launch/pip-tools.lock, before pip-compile could compute a single hash."""
    result = forged["update_lock"]
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-2000:]
    assert "(from -r launch/pip-tools.lock (line " in result.stderr
    assert LOCK.read_bytes() == forged["lock_before"]
