"""Split discovery: which files of a source are a dataset's train, valid and test splits.

A dataset names its rules (a ``SplitLayout``, datasets.py); sources.py applies them to the files
of a source directory or archive. Hidden files never count (our ``.done`` marker, editor and OS
droppings). A single file source belongs to the split its name mentions (``train`` when none).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

SPLITS = ("train", "valid", "test")
LM1B_TRAIN = re.compile(r"news\.en-\d{5}-of-00100$")
LM1B_HELDOUT = re.compile(r"news\.en\.heldout-00000-of-00050")


@dataclass(frozen=True)
class SplitLayout:
    """How a dataset's split files are named (the base: no rule for directories)."""

    name: str
    """Names the layout in the cache of extracted archives (datasets sharing it share entries)."""

    def in_directory(self, paths: list[str], root: str) -> dict[str, list[str]]:
        """The split files among ``paths`` (sorted, none hidden) under directory ``root``."""
        raise NotImplementedError

    def of_file(self, name: str) -> list[str]:
        """Splits a single file stands for, from its name."""
        named = [s for s in SPLITS if s in name]
        return named[:1] or ["train"]


@dataclass(frozen=True)
class NamedFiles(SplitLayout):
    """Per split the first file named by the first pattern that names one (official first)."""

    patterns: tuple[str, ...]
    """File names with ``{}`` for the split name, in order of preference."""

    def in_directory(self, paths: list[str], root: str) -> dict[str, list[str]]:
        found = {}
        for split in SPLITS:
            for name in (p.format(split) for p in self.patterns):
                hits = [p for p in paths if posixpath.basename(p) == name]
                if hits:
                    found[split] = hits[:1]
                    break
        return found


@dataclass(frozen=True)
class Lm1bFiles(SplitLayout):
    """Training shards are ``train``; held-out shard 0 is ``valid`` and ``test`` (as the
    reference ``getdata.sh`` does)."""

    def in_directory(self, paths: list[str], root: str) -> dict[str, list[str]]:
        train = [p for p in paths if LM1B_TRAIN.search(posixpath.basename(p))]
        heldout = [p for p in paths if LM1B_HELDOUT.match(posixpath.basename(p))][:1]
        found = {"train": train} if train else {}
        if heldout:
            found.update(valid=heldout, test=heldout)
        return found

    def of_file(self, name: str) -> list[str]:
        return ["valid", "test"] if LM1B_HELDOUT.search(name) else super().of_file(name)


@dataclass(frozen=True)
class TextFiles(SplitLayout):
    """``SPLIT/`` subdirectories, else split names in file names, else all files are train."""

    def in_directory(self, paths: list[str], root: str) -> dict[str, list[str]]:
        rel = {p: posixpath.relpath(p, root) for p in paths}
        by_dir = {s: [p for p in paths if rel[p].startswith(s + "/")] for s in SPLITS}
        if any(by_dir.values()):
            return {s: f for s, f in by_dir.items() if f}
        by_name = {s: [p for p in paths if s in posixpath.basename(p)] for s in SPLITS}
        if any(by_name.values()):
            return {s: f for s, f in by_name.items() if f}
        return {"train": paths}


def splits_in(layout: SplitLayout, paths: list[str], root: str) -> dict[str, list[str]]:
    """The split files of ``layout`` among ``paths`` (sorted) under directory ``root``."""
    visible = [p for p in paths if not posixpath.basename(p).startswith(".")]
    return layout.in_directory(visible, root)
