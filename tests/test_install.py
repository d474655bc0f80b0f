"""The environment holds the dependency versions of launch/constraints.txt (what CI installs)."""

from importlib import metadata

from tests.conftest import REPO_ROOT


def pinned() -> dict[str, str]:
    lines = (REPO_ROOT / "launch" / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    return {name.lower().replace("_", "-"): version for name, version in pins.items()}


def test_installed_versions_equal_the_constraints_file():
    pins = pinned()
    assert {"deepspeed", "webdataset", "wandb", "fsspec", "numpy"} <= pins.keys()
    # The first of a name on sys.path is the one imported: setuptools, once imported, appends
    # its _vendor folder, whose older vendored copies (platformdirs) come later.
    installed = {}
    for dist in metadata.distributions():
        installed.setdefault(dist.metadata["Name"].lower().replace("_", "-"), dist.version)
    differing = {
        name: (version, installed.get(name))
        for name, version in pins.items()
        if installed.get(name) != version
    }
    assert not differing, f"(pinned, installed): {differing}; rerun bash launch/install.sh"
