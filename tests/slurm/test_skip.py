"""Without root the SLURM tests skip, saying why: run in a user namespace, where we are not root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.slurm.conftest import INSTALL_ENV, system_packages


def test_without_root_the_cluster_tests_skip_with_the_reason():
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    pytest_args = [sys.executable, "-m", "pytest", "tests/slurm/test_sbatch.py", "-rs", "-q"]
    proc = subprocess.run(
        ["unshare", "--user", *pytest_args, "-p", "no:cacheprovider"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "unshare failed" in proc.stderr:  # user namespaces disabled on this machine
        pytest.skip(f"cannot create a user namespace: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "passed" not in proc.stdout and "failed" not in proc.stdout
    assert "skipped" in proc.stdout
    assert "the SLURM tests start daemons and network namespaces: run them as root" in proc.stdout


def test_missing_packages_skip_saying_so_unless_asked_to_install(monkeypatch):
    monkeypatch.delenv(INSTALL_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        system_packages({"txl-no-such-command": "txl-no-such-package", "sh": "dash"})
    assert str(skipped.value) == (
        f"needs txl-no-such-package: install them, or set {INSTALL_ENV}=1 to have the tests do it"
    )


def test_a_package_that_cannot_be_installed_skips_saying_why():
    if os.environ.get(INSTALL_ENV) != "1":
        pytest.skip(f"runs apt-get: only where {INSTALL_ENV}=1 allows it")
    with pytest.raises(pytest.skip.Exception) as skipped:  # or no network, or not root
        system_packages({"txl-no-such-command": "txl-no-such-package"})
    assert str(skipped.value).startswith("could not install txl-no-such-package: E: ")
