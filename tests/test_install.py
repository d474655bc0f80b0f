"""launch/install.sh's environment is launch/requirements.lock's, every file hash-checked."""

from __future__ import annotations

import os
import re
import sysconfig
from importlib import metadata

import pytest

from tests import processes
from tests.conftest import REPO_ROOT

LOCK = REPO_ROOT / "launch" / "requirements.lock"
ENTRY_START = re.compile(r"^(?=[^\s#])", re.MULTILINE)  # an entry's line starts in column 0
PIN = re.compile(r"([a-z0-9._-]+)==(\S+) \\\n")  # the first line of every entry
HASH = re.compile(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$", re.MULTILINE)
PROJECT = "txl-dist"


def entries() -> list[str]:
    """The lock's entries: a name==version line and the indented lines under it."""
    return [entry for entry in ENTRY_START.split(LOCK.read_text()) if not entry.startswith("#")]


def pins() -> dict[str, str]:
    return dict(PIN.match(entry).groups() for entry in entries())


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_entry_of_the_lock_is_pinned_and_hashed():
    lock = entries()
    assert len(lock) > 100
    unpinned = [entry.split("\n")[0] for entry in lock if not PIN.match(entry)]
    assert not unpinned, f"not a 'name==version \\' line: {unpinned}"
    unhashed = [entry.split(" ")[0] for entry in lock if not HASH.search(entry)]
    assert not unhashed, f"entries without a --hash: {unhashed}"
    assert {"torch", "deepspeed", "setuptools", "pip", "pytest"} <= pins().keys()


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
    offered = tmp_path / "offered"
    offered.mkdir()
    forged = offered / f"pip-{pins()['pip']}-py3-none-any.whl"
    forged.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip archive
    offline = {
        "PIP_CONFIG_FILE": os.devnull,  # no index, find-links or constraint of the machine's
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(offered),
    }
    venv = tmp_path / "venv"
    result = processes.run(
        ["bash", REPO_ROOT / "launch" / "install.sh"],
        timeout=120,
        env={**os.environ, **offline, "VENV": str(venv)},
    )
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-2000:]
    assert forged.name in result.stderr
    assert "installed into" not in result.stdout
    pip_left = processes.run([venv / "bin" / "python", "-m", "pip", "--version"], timeout=60)
    assert pip_left.stdout.split()[1] != pins()["pip"]
