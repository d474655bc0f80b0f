"""Units: the fixed grain of txl-prepare's work, what parts divide, reruns skip and merges join.

A split's files, read one after another, form one byte stream; unit u is bytes
``[u * unit_bytes, (u + 1) * unit_bytes)`` of it (so small files share a unit and large ones span
several). A unit holds the documents that *start* in it, the same rule that assigns documents to
pieces (corpora/boundaries.py), so units and pieces tile every split exactly. Units depend only on
the files and ``unit_bytes``, never on how many parts or workers there are: each unit's shards
are the same whoever writes them, which makes N parts + merge byte-identical to one run.

Between the steps a unit leaves a small JSON record in ``ROOT/.prepare/{split}/`` (its word
counts, or its shards), written after the data it describes, so a record means a finished unit
and a killed part is simply rerun. The final merge removes ``ROOT/.prepare``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

import fsspec

from data_pipeline.corpora.encoding import Documents
from data_pipeline.shards.errors import reading

DEFAULT_UNIT_BYTES = 1 << 26
WORK_DIR = ".prepare"


@dataclass(frozen=True)
class Unit:
    """Byte ranges of a split's files whose documents form one run of shards."""

    split: str
    """The split the unit belongs to."""
    index: int
    """Position of the unit in its split."""
    ranges: tuple[tuple[str, int, int, int], ...]
    """(file URL, start, stop, usable end of the file) in corpus order."""

    @property
    def name(self) -> str:
        """File name stem of the unit's records and shards, e.g. ``train-00003``."""
        return f"{self.split}-{self.index:05d}"

    def pieces(self, piece_bytes: int) -> list[tuple[str, int, int, int]]:
        """The unit's ranges cut into pieces of at most ``piece_bytes`` (one worker task each)."""
        return [
            (url, a, min(a + piece_bytes, stop), end)
            for url, start, stop, end in self.ranges
            for a in range(start, stop, max(piece_bytes, 1))
        ]

    @property
    def source_bytes(self) -> int:
        """Bytes of source text the unit covers."""
        return sum(stop - start for _, start, stop, _ in self.ranges)


def evenly_spaced(pieces: list[tuple[str, int, int, int]], budget: int) -> list:
    """As many of ``pieces`` as ``budget`` bytes hold (at least one), spread evenly over them in
    order: all of them when they fit. The choice depends on nothing but the pieces and budget."""
    total = sum(stop - start for _, start, stop, _ in pieces)
    if total <= budget:
        return pieces
    n = len(pieces)
    k = max(1, n * budget // total)
    return [pieces[(2 * j + 1) * n // (2 * k)] for j in range(k)]


def usable_size(url: str, documents: Documents, storage_options: dict) -> int:
    """Bytes of a file that hold documents (a WikiText file's cut last article excluded)."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    with reading("corpus file", url):
        return documents.usable_end(fs, path, url)


def split_units(
    split: str, files: list[str], documents: Documents, unit_bytes: int, storage_options: dict
) -> list[Unit]:
    """The units of a split: fixed windows of its files' concatenated usable bytes."""
    ranges: defaultdict[int, list] = defaultdict(list)
    offset = 0
    for url in files:
        end = usable_size(url, documents, storage_options)
        a = 0
        while a < end:
            u = (offset + a) // unit_bytes
            b = min(end, (u + 1) * unit_bytes - offset)
            ranges[u].append((url, a, b, end))
            a = b
        offset += end
    return [Unit(split, u, tuple(ranges[u])) for u in sorted(ranges)]


def part_units(units: list[Unit], part: int, parts: int) -> list[Unit]:
    """The units of part ``part`` (0-based) of ``parts``: a contiguous run of near-equal length."""
    return units[part * len(units) // parts : (part + 1) * len(units) // parts]


def parse_part(text: str) -> tuple[int, int]:
    """``I/N`` (1-based, as SLURM array indices are usually written) -> (I - 1, N)."""
    index, sep, count = text.partition("/")
    try:
        part, parts = int(index), int(count)
    except ValueError:
        part, parts = 0, 0
    if not sep or not 1 <= part <= parts:
        raise ValueError(f"--part {text!r} must be I/N with 1 <= I <= N, e.g. 2/8")
    return part - 1, parts


class Records:
    """JSON records of finished units under ``ROOT/.prepare`` (any fsspec filesystem)."""

    def __init__(self, fs, root_path: str):
        self.fs, self.dir = fs, f"{root_path}/{WORK_DIR}"

    def path(self, kind: str, unit: Unit | None = None) -> str:
        """Where a record lives: ``{split}/{kind}-{index}.json``, or ``{kind}.json`` if global."""
        if unit is None:
            return f"{self.dir}/{kind}.json"
        return f"{self.dir}/{unit.split}/{kind}-{unit.index:05d}.json"

    def write(self, kind: str, unit: Unit | None, record: dict) -> None:
        path = self.path(kind, unit)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, json.dumps(record).encode())

    def read(self, kind: str, unit: Unit | None, fingerprint: str) -> dict | None:
        """The record if it exists, is whole and was made from inputs with this fingerprint."""
        path = self.path(kind, unit)
        try:
            record = json.loads(self.fs.cat_file(path))
        except (FileNotFoundError, ValueError):  # not written yet, or cut off by a kill
            return None
        return record if record.get("fingerprint") == fingerprint else None

    def remove(self) -> None:
        """Drop every record (after the manifests are written)."""
        if self.fs.exists(self.dir):
            self.fs.rm(self.dir, recursive=True)


def describe(units: list[Unit]) -> str:
    """``units train-00003, train-00007 are`` (the first few), for error messages."""
    names = ", ".join(u.name for u in units[:5]) + (", ..." if len(units) > 5 else "")
    return f"unit{'s' if len(units) > 1 else ''} {names} {'are' if len(units) > 1 else 'is'}"
