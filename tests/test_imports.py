"""Imports run one way, as docs/layout.md states: down the order of txl_dist's folders, never
up; data_pipeline never imports txl_dist; the model (and the modules at txl_dist's root, which
it imports) needs torch only.

The source is read with ast, every import statement, so an import inside a function counts as
one at the top. The model's rule tells them apart: at import time torch and the standard
library only; when an export is read, safetensors and data_pipeline's readers of received
files too (`pretrained.py`, `schema.py`'s redaction of a shown value).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO_ROOT

ORDER = [
    ["cli"],
    ["harness"],
    ["engine"],
    ["hf"],
    ["exports"],
    ["evaluation"],
    ["process"],
    ["config"],
    ["model"],
    ["root"],
]
"""txl_dist's folders from the top down; "root" is the modules at txl_dist's root. A module
imports only from its own folder and the floors below its own (never a neighbour on its floor)."""
TORCH_ONLY = {"model", "root"}
"""The floors `import txl_dist.model` runs: torch and the standard library at import time."""
AT_IMPORT = {"torch", "triton"}  # triton: the fused kernel's, guarded, torch's CUDA builds bring it
WHEN_CALLED = {
    "safetensors",
    "data_pipeline.limits",
    "data_pipeline.received",
    "data_pipeline.redact",
    "data_pipeline.vocab",
}
"""What the torch-only floors may import inside a function: when an export is read, or a
config's bad value shown. data_pipeline's front door (its __init__) imports them too, but only
a caller that reads an export pays for it."""
HEAVY = ("webdataset", "fsspec", "tokenizers", "deepspeed", "data_pipeline")


@dataclass(frozen=True)
class Import:
    """One import statement's target, as the importing module names it (absolute)."""

    module: str
    """The importing module, dotted (a package by its name, not __init__)."""
    target: str
    """The imported module, dotted, relative imports resolved."""
    where: str
    """path:line of the statement."""
    lazy: bool
    """Inside a function: runs when it is called, not when the module is imported."""


def imports_under(root: Path, package: str) -> list[Import]:
    """Every import statement of every module of `package` (a folder of `root`)."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        is_package = parts[-1] == "__init__"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found += _imports(tree, module, is_package, f"{path.relative_to(root)}")
    return found


def _imports(tree: ast.AST, module: str, is_package: bool, path: str) -> list[Import]:
    found = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    lazy_nodes = {id(n) for f in ast.walk(tree) if isinstance(f, functions) for n in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = [_absolute(node, module, is_package)]
        else:
            continue
        lazy = id(node) in lazy_nodes
        found += [Import(module, t, f"{path}:{node.lineno}", lazy) for t in targets]
    return found


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """`from ..x import y`'s module, absolute."""
    if not node.level:
        return node.module
    base = module.split(".")[: len(module.split(".")) + is_package - node.level]
    return ".".join(base + ([node.module] if node.module else []))


def floor_of(module: str) -> str:
    """The folder of a txl_dist module ("root" for the modules at txl_dist's root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in _folders()) else "root"


def _folders() -> set[str]:
    return {name for floor in ORDER for name in floor} - {"root"}


def violations(root: Path) -> list[str]:
    """What breaks the rules in the packages under `root`, one line each."""
    rank = {name: i for i, floor in enumerate(ORDER) for name in floor}
    problems = []
    for imp in imports_under(root, "data_pipeline"):
        if _top(imp.target) == "txl_dist":
            problems.append(f"{imp.where}: data_pipeline imports {imp.target}: never txl_dist")
    for imp in imports_under(root, "txl_dist"):
        here = floor_of(imp.module)
        if here not in rank:
            problems.append(f"{imp.where}: txl_dist/{here}/ has no floor in ORDER (docs/layout.md)")
        elif _top(imp.target) == "txl_dist":
            there = floor_of(imp.target)
            if there != here and rank.get(there, -1) <= rank[here]:
                problems.append(f"{imp.where}: {imp.module} imports {imp.target}: up or sideways")
        elif here in TORCH_ONLY and not _torch_only(imp):
            problems.append(
                f"{imp.where}: {imp.module} imports {imp.target}"
                + (" (in a function)" if imp.lazy else "")
                + ": the model needs torch only"
            )
    return problems


def _top(target: str) -> str:
    return target.split(".")[0]


def _torch_only(imp: Import) -> bool:
    if _top(imp.target) in sys.stdlib_module_names or _top(imp.target) in AT_IMPORT:
        return True
    return imp.lazy and (imp.target in WHEN_CALLED or _top(imp.target) in WHEN_CALLED)


def order_line() -> str:
    """ORDER as docs/layout.md writes it."""
    return " > ".join(", ".join(f"`{name}`" for name in floor) for floor in ORDER)


def test_the_packages_import_one_way():
    assert violations(REPO_ROOT) == []


def test_docs_layout_states_the_order():
    assert order_line() in " ".join((REPO_ROOT / "docs" / "layout.md").read_text().split())


def test_importing_the_model_needs_torch_only():
    code = "import sys, txl_dist.model; print(' '.join(sorted(sys.modules)))"
    result = processes.run([sys.executable, "-c", code], timeout=120, check=True, cwd=REPO_ROOT)
    loaded = {name.split(".")[0] for name in result.stdout.split()}
    assert "torch" in loaded
    assert sorted(loaded & set(HEAVY)) == []


def plant(root: Path, files: dict[str, str]) -> Path:
    """A tree of packages under `root`: {relative path: source}."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CLEAN = {
    "txl_dist/__init__.py": "",
    "txl_dist/schema.py": "import dataclasses\n",
    "txl_dist/model/__init__.py": "import torch\nfrom txl_dist.schema import x\n",
    "txl_dist/model/load.py": "def f():\n    from data_pipeline.received import read\n",
    "txl_dist/engine/__init__.py": "from txl_dist.model import TXLConfig\nfrom . import sub\n",
    "txl_dist/engine/sub.py": "from ..model import load\nimport deepspeed\n",
    "data_pipeline/__init__.py": "import numpy\nfrom data_pipeline.received import read\n",
}


def test_a_clean_tree_passes(tmp_path):
    assert violations(plant(tmp_path, CLEAN)) == []


@pytest.mark.parametrize(
    "name,text,problem",
    [
        (
            "data_pipeline/streams.py",
            "import txl_dist.model\n",
            "data_pipeline/streams.py:1: data_pipeline imports txl_dist.model: never txl_dist",
        ),
        (
            "txl_dist/model/x.py",
            "import os\nfrom txl_dist.engine import train\n",
            "txl_dist/model/x.py:2: txl_dist.model.x imports txl_dist.engine: up or sideways",
        ),
        (
            "txl_dist/config/x.py",
            "from ..exports import loading\n",
            "txl_dist/config/x.py:1: txl_dist.config.x imports txl_dist.exports: up or sideways",
        ),
        (
            "txl_dist/model/x.py",
            "import deepspeed\n",
            "txl_dist/model/x.py:1: txl_dist.model.x imports deepspeed: the model needs torch only",
        ),
        (
            "txl_dist/schema.py",
            "from data_pipeline.redact import redact\n",
            "txl_dist/schema.py:1: txl_dist.schema imports data_pipeline.redact: the model "
            "needs torch only",
        ),
        (
            "txl_dist/model/x.py",
            "def f():\n    import webdataset\n",
            "txl_dist/model/x.py:2: txl_dist.model.x imports webdataset (in a function): the "
            "model needs torch only",
        ),
        (
            "txl_dist/attic/x.py",
            "import os\n",
            "txl_dist/attic/x.py:1: txl_dist/attic/ has no floor in ORDER (docs/layout.md)",
        ),
    ],
)
def test_a_planted_violation_is_named(tmp_path, name, text, problem):
    assert violations(plant(tmp_path, {**CLEAN, name: text})) == [problem]
