"""docs/layout.md names every module of the packages and every script, and nothing else.

Its entries are list items that start with a path in backticks: "- `txl_dist/config.py`: ...".
The tree's side is every .py file under txl_dist/, data_pipeline/ and bench/, and every file
under launch/ (shell scripts, batch scripts and the constraints too).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO_ROOT

LAYOUT = REPO_ROOT / "docs" / "layout.md"
ENTRY = re.compile(r"^- `([^`]+)`", re.MULTILINE)
PY_DIRS = ("txl_dist", "data_pipeline", "bench")
ALL_FILES_DIRS = ("launch",)


def listed(markdown: str) -> list[str]:
    """The paths the layout page names, in its order."""
    return ENTRY.findall(markdown)


def in_tree(root: Path) -> set[str]:
    """The modules and scripts the page must name, as paths relative to root."""
    files = [path for top in PY_DIRS for path in (root / top).rglob("*.py")]
    files += [path for top in ALL_FILES_DIRS for path in (root / top).rglob("*") if path.is_file()]
    return {path.relative_to(root).as_posix() for path in files if "__pycache__" not in path.parts}


def test_entries_are_list_items_starting_with_a_path():
    markdown = "- `a/b.py`: one\n  - `not/nested.py`\ntext `c.py`\n- `launch/x.sh`: two\n"
    assert listed(markdown) == ["a/b.py", "launch/x.sh"]


def test_the_tree_is_every_package_module_and_every_launch_file(tmp_path):
    for name in (
        "txl_dist/a.py", "txl_dist/engine/b.py", "txl_dist/engine/__pycache__/b.cpython-311.pyc",
        "txl_dist/notes.txt", "data_pipeline/c.py", "bench/d.py", "launch/e.sh",
        "launch/slurm/f.sbatch", "tests/g.py",
    ):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert in_tree(tmp_path) == {
        "txl_dist/a.py", "txl_dist/engine/b.py", "data_pipeline/c.py", "bench/d.py",
        "launch/e.sh", "launch/slurm/f.sbatch",
    }  # fmt: skip


def test_layout_page_names_every_module_once_and_only_modules_that_exist():
    names = listed(LAYOUT.read_text())
    tree = in_tree(REPO_ROOT)
    problems = [
        f"{what}: {paths}"
        for what, paths in (
            ("no line for", sorted(tree - set(names))),
            ("lines for files that do not exist", sorted(set(names) - tree)),
            ("named more than once", sorted({name for name in names if names.count(name) > 1})),
        )
        if paths
    ]
    assert not problems, "docs/layout.md is out of date: " + "; ".join(problems)


def unnamed_members(package: Path) -> list[str]:
    """The modules (`name.py`) and subpackages (`name/`) of a package that its __init__.py's
    docstring does not name."""
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    members = [f"{path.stem}.py" for path in package.glob("*.py")]
    members += [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").exists()]
    skipped = {"__init__.py", "__main__.py"}
    return sorted(
        m for m in members if m not in skipped and not re.search(rf"\b{re.escape(m)}", docstring)
    )


def test_unnamed_members_are_the_modules_and_subpackages_a_docstring_leaves_out(tmp_path):
    for name in ("a.py", "b.py", "__main__.py", "sub/__init__.py", "data/x.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "__init__.py").write_text(
        '"""The package: a.py reads; bb.py and sub are other names."""'
    )
    assert unnamed_members(tmp_path) == ["b.py", "sub/"]


def test_every_package_docstring_names_every_module_of_its_package():
    packages = [
        init.parent for top in PY_DIRS[:2] for init in (REPO_ROOT / top).rglob("__init__.py")
    ]
    problems = [
        f"{package.relative_to(REPO_ROOT)}/__init__.py does not name {', '.join(missing)}"
        for package in sorted(packages)
        if (missing := unnamed_members(package))
    ]
    assert not problems, "; ".join(problems)
