"""Sources and archives: where a dataset's files are, downloaded and extracted where needed.

``--source`` is a local path or any fsspec URL naming a directory, a single file, or an archive
(``.zip``, ``.tar``, ``.tar.gz``, ``.tgz``). Archives are downloaded into a cache directory
(checked against a checksum when one is known or given), and the split files the dataset needs
(splits.py) are extracted there once. Without ``--source`` the dataset's official archive is used,
checked against its published checksum (datasets.py). A corpus cut by position (enwik8, text8) is
cut into its splits in the cache (charlevel.py).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
from tqdm import tqdm

from data_pipeline.cache import built_once
from data_pipeline.corpora import charlevel
from data_pipeline.corpora.datasets import Dataset
from data_pipeline.corpora.splits import SPLITS, SplitLayout, splits_in
from data_pipeline.limits import ARCHIVE_BYTES, ARCHIVE_MEMBERS
from data_pipeline.shards.errors import (
    ChecksumError,
    CorpusFormatError,
    SourceUnreachableError,
    reading,
)

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
GLOB = re.compile(r"[*?[]")


def parse_checksum(spec: str) -> tuple[str, str]:
    """``ALGO:HEX`` (e.g. ``sha256:ab12...``) -> (algo, hex)."""
    algorithm, _, digest = spec.partition(":")
    if not digest or algorithm not in hashlib.algorithms_available:
        raise ValueError(f"checksum {spec!r} must look like sha256:HEX or md5:HEX")
    return algorithm, digest.lower()


def resolve_source(
    dataset: Dataset,
    source: str | None,
    cache_dir: str,
    checksum: str | None = None,
    storage_options: dict | None = None,
    test_chars: int = charlevel.DEFAULT_TEST_CHARS,
) -> str:
    """A directory or file URL holding the corpus, downloading and extracting archives (and
    cutting enwik8 / text8 into splits of ``test_chars``)."""
    expected = parse_checksum(checksum) if checksum else None
    official, size = source is None, None
    if official:
        if dataset.official is None:
            raise ValueError(f"--source is required for dataset {dataset.name!r}")
        known = dataset.official
        source, size = known.url, known.size
        expected = expected or (known.digest and (known.algorithm, known.digest))
    by_position = dataset.cut_by_position
    if not (by_position or source.endswith(ARCHIVE_SUFFIXES)):
        return source
    try:
        local = fetch(source, Path(cache_dir), expected, storage_options or {}, size)
    except SourceUnreachableError as err:
        if not official:
            raise
        raise SourceUnreachableError(
            f"{err}; offline, pass --source with a local copy of the corpus (a directory or the "
            "official archive)"
        ) from None
    if by_position:
        if not local.is_file():
            raise CorpusFormatError(
                f"{source} is not a file; {dataset.name} comes as {dataset.name}.zip or the "
                f"unpacked {dataset.name} file"
            )
        digest = file_digest(local)
        cut = charlevel.cut_splits(local, digest, Path(cache_dir), dataset.name, test_chars)
        return str(cut)
    return str(extract(local, Path(cache_dir), dataset))


def fetch(
    url: str,
    cache: Path,
    expected: tuple[str, str] | None,
    storage_options: dict,
    size: int | None = None,
) -> Path:
    """A local copy of ``url`` whose checksum (or size) was checked; reused when cached.

    The cache entry is named by a digest of the full URL and the remote size, so two
    ``corpus.zip`` from two places never share one.
    """
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    if "file" in fs.protocol:
        local = Path(path)
    else:
        local = cache / f"{_url_key(fs, path, url)}-{posixpath.basename(path)}"
        if not local.exists():
            download(fs, path, local, url)
    if size is not None and local.stat().st_size != size:
        raise ChecksumError(
            f"{url}: {local.stat().st_size} bytes, the official file has {size}; the download "
            f"is cut or not the official file. Delete {local} and retry"
        )
    if expected:
        check_file_digest(local, *expected, url)
    return local


def _url_key(fs, path: str, url: str) -> str:
    try:
        size = fs.size(path)
    except OSError:  # download() reports an unreachable source
        size = None
    return hashlib.sha256(f"{url}\n{size}".encode()).hexdigest()[:16]


def download(fs, path: str, local: Path, url: str) -> None:
    """Copy a remote file to ``local`` with a progress bar (atomically, via a .part file)."""
    local.parent.mkdir(parents=True, exist_ok=True)
    part = local.with_name(local.name + ".part")
    with reading("source", url):
        size = fs.size(path)
        bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"download {local.name}",
                   disable=None)  # fmt: skip
        with fs.open(path, "rb") as src, part.open("wb") as dst, bar:
            while block := src.read(1 << 22):
                dst.write(block)
                bar.update(len(block))
    part.replace(local)


def file_digest(local: Path, algorithm: str = "sha256") -> str:
    h = hashlib.new(algorithm)
    with local.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def check_file_digest(local: Path, algorithm: str, digest: str, url: str) -> None:
    """Raise ChecksumError unless ``local`` hashes to ``digest``."""
    actual = file_digest(local, algorithm)
    if actual != digest:
        raise ChecksumError(
            f"{url}: {algorithm} is {actual}, expected {digest}; the download is "
            f"corrupt or not the official file. Delete {local} and retry, or pass the right "
            f"--source-checksum"
        )


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps checked before anything is extracted (the official archives with headroom)."""

    max_bytes: int = field(default_factory=ARCHIVE_BYTES.value)
    """Uncompressed bytes of the split files extracted (limits.ARCHIVE_BYTES)."""
    max_members: int = field(default_factory=ARCHIVE_MEMBERS.value)
    """Members (limits.ARCHIVE_MEMBERS)."""


def extract(
    archive: Path, cache: Path, dataset: Dataset, limits: ArchiveLimits | None = None
) -> Path:
    """Extract the split files ``dataset`` needs from ``archive`` into the cache, once.

    The ``.done`` marker holds the archive's sha256. Extraction goes to a temporary directory
    that is renamed when complete; a marker whose digest is not the archive's (another archive,
    or a planted marker) means extract again.
    """
    layout = dataset.splits
    digest = file_digest(archive)
    return built_once(
        cache / f"{digest[:16]}-{layout.name}-{archive.name}.d",
        digest,
        lambda tmp: _extract_checked(archive, tmp, layout, limits or ArchiveLimits()),
    )


# What a damaged or unusual archive raises: zipfile's NotImplementedError for a compression
# method it lacks, RuntimeError for an encrypted member, zlib.error for corrupt deflate data.
ARCHIVE_ERRORS = (
    tarfile.TarError,
    zipfile.BadZipFile,
    EOFError,
    NotImplementedError,
    RuntimeError,
    zlib.error,
)


def _extract_checked(archive: Path, out: Path, layout: SplitLayout, limits: ArchiveLimits) -> None:
    """Extract the split files (regular files only) after checking names, count and size."""
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                members = zf.infolist()
                files = {m.filename: m for m in members if not m.is_dir()}
                names = [m.filename for m in members]
                wanted = _split_members(archive, layout, names, files, limits)
                zf.extractall(out, [files[n] for n in wanted])
        else:
            with tarfile.open(archive) as tf:
                members = _tar_members(tf, archive, limits)
                files = {m.name: m for m in members if m.isfile()}
                names = [m.name for m in members]
                wanted = _split_members(archive, layout, names, files, limits)
                tf.extractall(out, [files[n] for n in wanted], filter="data")
    except ARCHIVE_ERRORS as err:
        raise CorpusFormatError(f"{archive}: cannot extract: {err}") from err
    except OSError as err:  # a name too long for this file system, among others
        raise CorpusFormatError(f"{archive}: cannot extract: {err.strerror or err}") from err


def _tar_members(tf: tarfile.TarFile, archive: Path, limits: ArchiveLimits) -> list:
    """The tar's members, counted as they are read: a few hundred KB of compressed empty
    headers would otherwise all be parsed (and held) before the count is checked."""
    members = []
    for member in tf:
        members.append(member)
        if len(members) > limits.max_members:
            raise CorpusFormatError(
                f"{archive}: more than {limits.max_members} members, over the limit "
                "(TXL_ARCHIVE_MAX_MEMBERS raises it for a trusted archive)"
            )
    return members


def _split_members(
    archive: Path, layout: SplitLayout, names: list[str], files: dict, limits: ArchiveLimits
) -> list[str]:
    """Names of the split files among ``files`` (name -> member), once the archive passed its
    checks: member count, names inside the archive, uncompressed bytes of what is extracted."""
    if len(names) > limits.max_members:
        raise CorpusFormatError(
            f"{archive}: {len(names)} members, over the limit of {limits.max_members} "
            "(TXL_ARCHIVE_MAX_MEMBERS raises it for a trusted archive)"
        )
    for name in names:
        if name.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", name):
            raise CorpusFormatError(f"{archive}: member {name!r} points outside the archive")
    found = splits_in(layout, sorted(files), ".")
    wanted = sorted({name for split_names in found.values() for name in split_names})
    if not wanted:
        raise CorpusFormatError(
            f"{archive}: none of its {len(names)} members is a {layout.name} split file"
        )
    total = sum(_member_size(files[name]) for name in wanted)
    if total > limits.max_bytes:
        raise CorpusFormatError(
            f"{archive}: its split files hold {total} bytes uncompressed; over the limit of "
            f"{limits.max_bytes} (TXL_ARCHIVE_MAX_BYTES raises it for a trusted archive)"
        )
    return wanted


def _member_size(member: zipfile.ZipInfo | tarfile.TarInfo) -> int:
    return member.file_size if isinstance(member, zipfile.ZipInfo) else member.size


def split_files(
    dataset: Dataset, source: str, storage_options: dict | None = None
) -> dict[str, list[str]]:
    """Map each split present in ``source`` to its files (fsspec URLs, sorted)."""
    fs, root = fsspec.core.url_to_fs(source, **(storage_options or {}))
    with reading("source", source):
        if GLOB.search(root):  # a glob: its files, split as under the directory it starts in
            files, root, is_dir = sorted(fs.glob(root)), GLOB.split(root)[0].rsplit("/", 1)[0], True
        else:
            is_dir = fs.isdir(root)
            files = sorted(fs.find(root)) if is_dir else [root] if fs.exists(root) else []
    if not files:
        raise SourceUnreachableError(
            f"source {source} does not exist or holds no files; check --source"
        )
    if is_dir:
        found = splits_in(dataset.splits, files, root)
    else:
        found = {s: files for s in dataset.splits.of_file(posixpath.basename(root))}
    if not found:
        raise CorpusFormatError(f"no {dataset.name} split files found under {source}")
    return {s: [fs.unstrip_protocol(p) for p in found[s]] for s in SPLITS if s in found}
