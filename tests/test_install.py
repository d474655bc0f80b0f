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


def test_install_refuses_a_download_whose_hash_is_not_the_locks(tmp_path):
    """The first package install.sh installs, pip itself, offered as a forged file of the lock's
    name and version: pip refuses it and the install stops, leaving the venv's own pip."""
    forged = f"pip-{pins()['pip']}-py3-none-any.whl"
    offline = offline_index(tmp_path, [forged])
    venv = tmp_path / "venv"
    result = processes.run(
        ["bash", REPO_ROOT / "launch" / "install.sh"],
        timeout=120,
        env={**os.environ, **offline, "VENV": str(venv)},
    )
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-2000:]
    assert forged in result.stderr
    assert "installed into" not in result.stdout
    pip_left = processes.run([venv / "bin" / "python", "-m", "pip", "--version"], timeout=60)
    assert pip_left.stdout.split()[1] != pins()["pip"]


def test_the_lock_tool_is_installed_from_its_own_hashed_lock(tmp_path):
    """update_lock.sh offered forged files of pip-tools and its dependencies: pip refuses them
    by the hashes of launch/pip-tools.lock, before pip-compile could compute a single hash."""
    tools = pins(TOOLS_LOCK)
    forged = [
        f"{name.replace('-', '_')}-{version}-py3-none-any.whl" for name, version in tools.items()
    ]
    before = LOCK.read_bytes()
    result = processes.run(
        ["bash", REPO_ROOT / "launch" / "update_lock.sh", "--no-upgrade"],
        timeout=120,
        env={**os.environ, **offline_index(tmp_path, forged)},
    )
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-2000:]
    assert "(from -r launch/pip-tools.lock (line " in result.stderr
    assert LOCK.read_bytes() == before
