"""Corpus readers: locate the split files of a source, cut them at document boundaries, tokenize.

Sources (``--source``): a local path or any fsspec URL naming a directory, a single file, or an
archive (``.zip``, ``.tar``, ``.tar.gz``, ``.tgz``). Archives are downloaded into a cache
directory (checked against a checksum when one is known or given), and the split files the
dataset needs (below) are extracted there once.
Without ``--source`` the dataset's official archive is used, checked against its published
checksum (``OFFICIAL_SOURCES``).

Split files by dataset:

* WikiText (``wikitext-103``, ``wikitext-2``): ``wiki.{train,valid,test}.tokens`` (official names)
  or ``{train,valid,test}.txt``. Each line is split on whitespace and gets ``<eos>``, blank lines
  included (reference ``tokenize(add_eos=True)``). An article starts at the ``" "`` line directly
  before a `` = Title = `` line that has a ``" "`` line after it too. A file that does not end
  with a newline is a cut prefix: its last (partial) article is dropped, with a warning.
* lm1b: training files ``news.en-NNNNN-of-00100``; held-out ``news.en.heldout-00000-of-00050*``
  is both ``valid`` and ``test``, as in the reference ``getdata.sh``. Each line is a sentence and
  a document, encoded ``<S> w1 ... wn <S>`` (reference ``add_double_eos``).
* enwik8, text8: the official zip or the unpacked file, cut by position into the three splits
  and tokenized per byte or character as the reference does (charlevel.py).
* ptb: ``ptb.{train,valid,test}.txt`` (official names, in ``simple-examples.tgz``) or
  ``{train,valid,test}.txt``; each file one document, lines lower-cased, split on whitespace,
  ``<eos>`` per line (reference ``Corpus`` with ``lower_case=True``).
* text: UTF-8 files under ``train/``, ``valid/``, ``test/`` subdirectories, else files whose name
  contains the split name, else every file is ``train``. Lines are tokenized as WikiText; a
  document is a whole file (``text_docs="file"``) or a block between blank lines
  (``text_docs="block"``, the blank lines themselves are not tokens).

A single file source belongs to the split its name mentions (``train`` when none).
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import numpy as np
from tqdm import tqdm

from data_pipeline import charlevel
from data_pipeline.cache import built_once
from data_pipeline.errors import ChecksumError, CorpusFormatError, SourceUnreachableError, reading
from data_pipeline.redact import redact_text
from data_pipeline.vocab import EOS, SENTENCE, UNK_LM1B, UNK_WIKI, Vocab
from data_pipeline.wordids import has_exotic_space, split_ids

log = logging.getLogger(__name__)

DATASETS = ("wikitext-103", "wikitext-2", "lm1b", "enwik8", "text8", "ptb", "text")
SPLITS = ("train", "valid", "test")
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
# A character that never occurs in text corpora; it stands for a line end while splitting.
MARK = b"\x00"
TITLE_BOUNDARY = re.compile(rb"^ \r?\n = [^=\r\n][^\r\n]*[^=\r\n] = \r?\n(?= \r?\n)", re.M)
# TITLE_BOUNDARY as the newline before it (only that consumed, so back-to-back titles both
# match): a literal first byte lets re jump between line ends where "^" tries every byte (over a
# whole piece, 15x slower).
TITLE_AFTER_NEWLINE = re.compile(b"\n(?=" + TITLE_BOUNDARY.pattern.removeprefix(b"^") + b")", re.M)
BLANK_RUN = re.compile(rb"\n(?:[ \t\x0b\x0c]*\n)+")
EMPTY_LINE = re.compile(rb"\n\r?\n")
# Whitespace to str.split() that bytes.split() does not know, as UTF-8 and as text.
EXOTIC_SPACE = re.compile(
    rb"[\x1c-\x1f]|\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f|\xe3\x80\x80"
)
EXOTIC_SPACE_TEXT = re.compile(
    "[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)
LM1B_TRAIN = re.compile(r"news\.en-\d{5}-of-00100$")
LM1B_HELDOUT = re.compile(r"news\.en\.heldout-00000-of-00050")


@dataclass(frozen=True)
class Download:
    """An official archive and its published checksum (or, where none is published, size)."""

    url: str
    """Where the archive is published."""
    algorithm: str | None
    """hashlib name of the published checksum (md5 or sha256); None where none is published."""
    digest: str | None
    """The published checksum, hex."""
    size: int | None = None
    """Size in bytes of the archive."""


OFFICIAL_SOURCES = {
    # md5 as published with the dataset (also used by torchtext).
    "wikitext-103": Download(
        "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
        "md5",
        "9ddaacaf6af0710eda8c456decff7832",
    ),
    "wikitext-2": Download(
        "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
        "md5",
        "542ccefacc6c27f945fb54453812b3cd",
    ),
    # sha256 from tensorflow_datasets' lm1b checksums.tsv (1,792,209,805 bytes).
    "lm1b": Download(
        "http://www.statmt.org/lm-benchmark/1-billion-word-language-modeling-benchmark-r13output.tar.gz",
        "sha256",
        "01ba60381110baf7f189dfd2b8374de371e8c9a340835793f190bdae9e90a34e",
    ),
    # No checksum is published for these three; their sizes are the ones every downloader
    # checks: enwik8.zip 36,445,475 (HF LTCB/enwik8 dataset card, download_size), text8.zip
    # 31,344,016 (TensorFlow's word2vec tutorial, maybe_download), simple-examples.tgz
    # 34,869,662 (TensorFlow's PTB tutorial data scripts, archive_size).
    "enwik8": Download("http://mattmahoney.net/dc/enwik8.zip", None, None, 36_445_475),
    "text8": Download("http://mattmahoney.net/dc/text8.zip", None, None, 31_344_016),
    "ptb": Download(
        "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz", None, None, 34_869_662
    ),
}

SPECIALS = {
    "wikitext": [EOS],
    "lm1b": [SENTENCE, UNK_LM1B],
    "enwik8": [],
    "text8": [],
    "ptb": [EOS],
    "text": [EOS, UNK_WIKI],
}
DEFAULT_MIN_COUNT = {"wikitext": 0, "lm1b": 3, "enwik8": 0, "text8": 0, "ptb": 0, "text": 1}
# Datasets whose vocabulary counts all three splits (reference data_utils.Corpus; WikiText-103
# counts train only).
VOCAB_FROM_ALL_SPLITS = ("wikitext-2", "enwik8", "text8", "ptb")
# Kinds whose split files are each one document.
WHOLE_FILE_KINDS = ("text-file", "enwik8", "text8", "ptb")


def level(dataset: str) -> str:
    """``char`` for the character-level datasets (their loss reads as bpc), else ``word``."""
    return "char" if dataset in charlevel.TOKENIZERS else "word"


def family(dataset: str) -> str:
    """The tokenization family of a dataset name: wikitext, lm1b or text."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    return "wikitext" if dataset.startswith("wikitext") else dataset


@dataclass
class EncodedChunk:
    """Tokens of a run of whole documents: ids local to the chunk, or a vocabulary's."""

    words: list[bytes] | None
    """Distinct words (UTF-8) in first-appearance order, local id i is words[i]; None when the
    ids are a vocabulary's."""
    ids: np.ndarray
    """int32 local or vocabulary id of every token, in corpus order."""
    doc_lengths: np.ndarray
    """int64 token count of each document; sums to len(ids)."""
    source_bytes: int
    """Bytes of the source file this chunk accounts for (for progress)."""
    oov_tokens: int = 0
    """Tokens mapped to the vocabulary's unknown token that are not that token themselves."""

    @classmethod
    def empty(cls) -> EncodedChunk:
        """A chunk without documents (a range holding no document start)."""
        return cls([], np.zeros(0, np.int32), np.zeros(0, np.int64), 0)


@dataclass
class Tokens:
    """The words of a text with its line marks (MARK words) located."""

    words: list[bytes] | None
    """Distinct words in first-appearance order (a MARK word replaced by the word it stands
    for); None when the ids are a vocabulary's."""
    ids: np.ndarray
    """int32 id of every word (local or the vocabulary's)."""
    marks: np.ndarray
    """Positions of the MARK words."""
    oov_tokens: int
    """Words the vocabulary lacks (0 for local ids)."""


# Tokenizer(text, mark_word): the Tokens of text, its MARK words standing for mark_word.
Tokenizer = Callable[[bytes, str], Tokens]


def local_tokens(text: bytes, mark_word: str) -> Tokens:
    """Ids local to ``text``, by first appearance (what counting needs)."""
    words, ids = split_ids(text)
    if MARK not in words:
        return Tokens(words, ids, np.zeros(0, np.int64), 0)
    mark_id = words.index(MARK)
    words[mark_id] = mark_word.encode()
    return Tokens(words, ids, np.flatnonzero(ids == mark_id), 0)


def tokenizer(vocab: Vocab | None) -> Tokenizer:
    """Straight to ``vocab``'s ids where its hash table can say them, else local ids."""
    if vocab is None or not vocab.table.usable():
        return local_tokens

    def vocab_tokens(text: bytes, mark_word: str) -> Tokens:
        return Tokens(None, *vocab.encode_text(text, mark_word))

    return vocab_tokens


# ---------------------------------------------------------------- sources, archives, downloads


def parse_checksum(spec: str) -> tuple[str, str]:
    """``ALGO:HEX`` (e.g. ``sha256:ab12...``) -> (algo, hex)."""
    algorithm, _, digest = spec.partition(":")
    if not digest or algorithm not in hashlib.algorithms_available:
        raise ValueError(f"checksum {spec!r} must look like sha256:HEX or md5:HEX")
    return algorithm, digest.lower()


def resolve_source(
    dataset: str,
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
        if dataset not in OFFICIAL_SOURCES:
            raise ValueError(f"--source is required for dataset {dataset!r}")
        known = OFFICIAL_SOURCES[dataset]
        source, size = known.url, known.size
        expected = expected or (known.digest and (known.algorithm, known.digest))
    by_position = dataset in charlevel.TOKENIZERS
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
                f"{source} is not a file; {dataset} comes as {dataset}.zip or the unpacked "
                f"{dataset} file"
            )
        cut = charlevel.cut_splits(local, file_digest(local), Path(cache_dir), dataset, test_chars)
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
        bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"download {local.name}")
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

    max_bytes: int = field(
        default_factory=lambda: int(os.environ.get("TXL_ARCHIVE_MAX_BYTES", 16 << 30))
    )
    """Uncompressed bytes of the split files extracted (lm1b's whole archive holds 4.2 GB)."""
    max_members: int = field(
        default_factory=lambda: int(os.environ.get("TXL_ARCHIVE_MAX_MEMBERS", 10_000))
    )
    """Members (lm1b's archive holds a few hundred)."""


def extract(archive: Path, cache: Path, dataset: str, limits: ArchiveLimits | None = None) -> Path:
    """Extract the split files ``dataset`` needs from ``archive`` into the cache, once.

    The ``.done`` marker holds the archive's sha256. Extraction goes to a temporary directory
    that is renamed when complete; a marker whose digest is not the archive's (another archive,
    or a planted marker) means extract again.
    """
    kind = family(dataset)
    digest = file_digest(archive)
    return built_once(
        cache / f"{digest[:16]}-{kind}-{archive.name}.d",
        digest,
        lambda tmp: _extract_checked(archive, tmp, kind, limits or ArchiveLimits()),
    )


def _extract_checked(archive: Path, out: Path, kind: str, limits: ArchiveLimits) -> None:
    """Extract the split files (regular files only) after checking names, count and size."""
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                members = zf.infolist()
                files = {m.filename: m for m in members if not m.is_dir()}
                names = [m.filename for m in members]
                wanted = _split_members(archive, kind, names, files, limits)
                zf.extractall(out, [files[n] for n in wanted])
        else:
            with tarfile.open(archive) as tf:
                members = tf.getmembers()
                files = {m.name: m for m in members if m.isfile()}
                wanted = _split_members(archive, kind, [m.name for m in members], files, limits)
                tf.extractall(out, [files[n] for n in wanted], filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as err:
        raise CorpusFormatError(f"{archive}: cannot extract: {err}") from err


def _split_members(
    archive: Path, kind: str, names: list[str], files: dict, limits: ArchiveLimits
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
    found = splits_in(kind, sorted(files), ".")
    wanted = sorted({name for split_names in found.values() for name in split_names})
    if not wanted:
        raise CorpusFormatError(
            f"{archive}: none of its {len(names)} members is a {kind} split file"
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


# ---------------------------------------------------------------- split discovery


def split_files(
    dataset: str, source: str, storage_options: dict | None = None
) -> dict[str, list[str]]:
    """Map each split present in ``source`` to its files (fsspec URLs, sorted)."""
    fs, root = fsspec.core.url_to_fs(source, **(storage_options or {}))
    with reading("source", source):
        is_dir = fs.isdir(root)
        files = sorted(fs.find(root)) if is_dir else [root] if fs.exists(root) else []
    if not files:
        raise SourceUnreachableError(
            f"source {source} does not exist or holds no files; check --source"
        )
    kind = family(dataset)
    if is_dir:
        found = splits_in(kind, files, root)
    else:
        found = {s: files for s in splits_named_in(posixpath.basename(root), kind)}
    if not found:
        raise CorpusFormatError(f"no {dataset} split files found under {source}")
    return {s: [fs.unstrip_protocol(p) for p in found[s]] for s in SPLITS if s in found}


def splits_in(kind: str, paths: list[str], root: str) -> dict[str, list[str]]:
    """The split files of a ``kind`` dataset among ``paths`` (sorted) under directory ``root``.

    Hidden files never count (our ``.done`` marker, editor and OS droppings).
    """
    paths = [p for p in paths if not posixpath.basename(p).startswith(".")]
    if kind == "wikitext":
        return named_files(paths, ("wiki.{}.tokens", "{}.txt"))
    if kind == "ptb":
        return named_files(paths, ("ptb.{}.txt", "{}.txt"))
    if kind in charlevel.TOKENIZERS:
        return named_files(paths, ("{}.txt",))
    if kind == "lm1b":
        return lm1b_files(paths)
    return text_files(paths, root)


def splits_named_in(name: str, kind: str) -> list[str]:
    """Splits a single file stands for, from its name."""
    if kind == "lm1b" and LM1B_HELDOUT.search(name):
        return ["valid", "test"]
    named = [s for s in SPLITS if s in name]
    return named[:1] or ["train"]


def named_files(paths: list[str], patterns: tuple[str, ...]) -> dict[str, list[str]]:
    """Per split the first file named by the first pattern that names one (official first)."""
    found = {}
    for split in SPLITS:
        for name in (p.format(split) for p in patterns):
            hits = [p for p in paths if posixpath.basename(p) == name]
            if hits:
                found[split] = hits[:1]
                break
    return found


def lm1b_files(paths: list[str]) -> dict[str, list[str]]:
    """Training shards are ``train``; held-out shard 0 is ``valid`` and ``test``."""
    train = [p for p in paths if LM1B_TRAIN.search(posixpath.basename(p))]
    heldout = [p for p in paths if LM1B_HELDOUT.match(posixpath.basename(p))][:1]
    found = {"train": train} if train else {}
    if heldout:
        found.update(valid=heldout, test=heldout)
    return found


def text_files(paths: list[str], root: str) -> dict[str, list[str]]:
    """``SPLIT/`` subdirectories, else split names in file names, else all files are train."""
    rel = {p: posixpath.relpath(p, root) for p in paths}
    by_dir = {s: [p for p in paths if rel[p].startswith(s + "/")] for s in SPLITS}
    if any(by_dir.values()):
        return {s: f for s, f in by_dir.items() if f}
    by_name = {s: [p for p in paths if s in posixpath.basename(p)] for s in SPLITS}
    if any(by_name.values()):
        return {s: f for s, f in by_name.items() if f}
    return {"train": paths}


# ---------------------------------------------------------------- document-aligned byte ranges
#
# A file is cut into nominal ranges of ``piece_bytes``; each worker moves both ends of its range
# to the next document boundary itself (reading only a small window), so the main process never
# reads text and neighbouring ranges agree on their common boundary.


def next_article(data: bytes, pos: int) -> int | None:
    """First WikiText article start at or after ``pos``."""
    m = TITLE_BOUNDARY.search(data, pos)
    return m.start() if m else None


def next_line(data: bytes, pos: int) -> int | None:
    """First line start at or after ``pos`` (an lm1b sentence boundary)."""
    if data[pos - 1 : pos] == b"\n":
        return pos
    i = data.find(b"\n", pos)
    return i + 1 if i >= 0 else None


def next_block(data: bytes, pos: int) -> int | None:
    """First position after an empty line at or after ``pos`` (a text block boundary)."""
    m = EMPTY_LINE.search(data, pos - 2)
    return m.end() if m else None


BOUNDARY_FINDERS: dict[str, Callable[[bytes, int], int | None]] = {
    "wikitext": next_article,
    "lm1b": next_line,
    "text-block": next_block,
}
CONTEXT = 2  # bytes read before a search position so that "^" and "\n\n" see what precedes it


def chunk_kind(dataset: str, text_docs: str = "block") -> str:
    """Key of BOUNDARY_FINDERS / ENCODERS for a dataset."""
    kind = family(dataset)
    if kind != "text":
        return kind
    if text_docs not in ("block", "file"):
        raise ValueError(f"text_docs must be 'block' or 'file', not {text_docs!r}")
    return f"text-{text_docs}"


def read_range(fs, path: str, start: int, stop: int, url: str) -> bytes:
    """Bytes [start, stop) of a corpus file, with read failures as DataErrors."""
    with reading("corpus file", url):
        return fs.cat_file(path, start, stop)


def boundary_at_or_after(fs, path: str, url: str, kind: str, pos: int, end: int) -> int:
    """First document boundary at or after byte ``pos`` of a file (``end`` if none)."""
    if kind in WHOLE_FILE_KINDS:
        return 0 if pos <= 0 else end
    if pos <= 0 or pos >= end:
        return min(max(pos, 0), end)
    window = 1 << 16
    while True:
        lo, hi = max(pos - CONTEXT, 0), min(pos + window, end)
        found = BOUNDARY_FINDERS[kind](read_range(fs, path, lo, hi, url), pos - lo)
        if found is not None:
            return lo + found
        if hi == end:
            return end
        window *= 4


def usable_end(fs, path: str, url: str, kind: str) -> int:
    """File size, less a WikiText file's cut last article (the file lacks a final newline)."""
    size = fs.size(path)
    if kind != "wikitext" or size == 0 or read_range(fs, path, size - 1, size, url) == b"\n":
        return size
    window = 1 << 16
    while True:
        lo = max(size - window, 0)
        data = read_range(fs, path, lo, size, url)
        starts = [m.start() for m in TITLE_BOUNDARY.finditer(data, 0 if lo == 0 else CONTEXT)]
        if starts or lo == 0:
            end = lo + starts[-1] if starts else 0
            shown = redact_text(url)
            log.warning("%s does not end with a newline: dropped its last, cut article", shown)
            return end
        window *= 4


# ---------------------------------------------------------------- tokenization


def normalized(data: bytes) -> bytes:
    """Bytes whose ASCII-whitespace split per line equals the reference's ``str.split()``."""
    # Rare: CR line ends (the reference reads with universal newlines) or whitespace that only
    # str.split() knows. Replacing the latter by spaces keeps the tokens (they separate words).
    if b"\r" not in data and not has_exotic_space(data):
        return data
    text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    return EXOTIC_SPACE_TEXT.sub(" ", text).encode("utf-8")


def encode_lines(data: bytes, tokenize: Tokenizer, doc_starts_at_lines: list[int]) -> EncodedChunk:
    """Lines + ``<eos>``; documents start at the given line numbers (0 is implied)."""
    tokens = tokenize(data.replace(b"\n", b" \x00 "), EOS)
    if not len(tokens.marks):
        return EncodedChunk(tokens.words, tokens.ids, np.zeros(0, np.int64), len(data))
    starts = tokens.marks[np.asarray(doc_starts_at_lines, dtype=np.int64) - 1] + 1
    bounds = np.concatenate([[0], starts, [len(tokens.ids)]])
    lengths = np.diff(bounds).astype(np.int64)
    return EncodedChunk(tokens.words, tokens.ids, lengths, len(data), tokens.oov_tokens)


def encode_wikitext(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """WikiText lines + ``<eos>``; articles start at title boundaries."""
    lines, pos, doc_lines = 0, 0, []
    for m in TITLE_AFTER_NEWLINE.finditer(data):
        lines += data.count(b"\n", pos, m.start() + 1)
        pos = m.start() + 1
        doc_lines.append(lines)
    return encode_lines(data, tokenize, doc_lines)


def encode_lm1b(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """Each line a sentence document ``<S> w1 ... wn <S>``."""
    marked = b"\x00 " + data[:-1].replace(b"\n", b" \x00 \x00 ") + b" \x00"
    tokens = tokenize(marked, SENTENCE)
    marks = tokens.marks
    lengths = (marks[1::2] - marks[0::2] + 1).astype(np.int64)
    return EncodedChunk(tokens.words, tokens.ids, lengths, len(data), tokens.oov_tokens)


def encode_text_blocks(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """Blank-line-separated blocks, each a document of lines + ``<eos>``."""
    blocks = [b.strip(b"\n") for b in BLANK_RUN.split(b"\n" + data) if b.strip()]
    line_counts = np.cumsum([b.count(b"\n") + 1 for b in blocks])
    chunk = encode_lines(b"\n".join(blocks) + b"\n", tokenize, line_counts[:-1].tolist())
    chunk.source_bytes = len(data)
    return chunk


def encode_text_file(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """A whole file as one document of lines + ``<eos>``."""
    return encode_lines(data, tokenize, [])


def encode_ptb(data: bytes, tokenize: Tokenizer) -> EncodedChunk:
    """A whole PTB file as one document of lower-cased lines + ``<eos>``."""
    lower = data.lower() if data.isascii() else data.decode().lower().encode()
    return encode_lines(lower, tokenize, [])


ENCODERS: dict[str, Callable[[bytes, Tokenizer], EncodedChunk]] = {
    "wikitext": encode_wikitext,
    "lm1b": encode_lm1b,
    "text-block": encode_text_blocks,
    "text-file": encode_text_file,
    "ptb": encode_ptb,
}


def encode_range(
    kind: str,
    url: str,
    start: int,
    stop: int,
    end: int,
    storage_options: dict | None = None,
    vocab: Vocab | None = None,
) -> EncodedChunk:
    """Tokenize the whole documents that begin in bytes [start, stop) (runs in workers), into
    ``vocab``'s ids when one is given, else ids local to the chunk."""
    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    first = boundary_at_or_after(fs, path, url, kind, start, end)
    last = boundary_at_or_after(fs, path, url, kind, stop, end)
    data = read_range(fs, path, first, last, url) if last > first else b""
    if kind in charlevel.TOKENIZERS:  # bytes, not lines of text
        words, ids = charlevel.TOKENIZERS[kind](data, url) if data else ([], np.zeros(0, np.int32))
        lengths = np.asarray([len(ids)] if len(ids) else [], np.int64)
        chunk = EncodedChunk([w.encode() for w in words], ids, lengths, stop - start)
        return in_vocab(chunk, vocab)
    if MARK in data:
        raise CorpusFormatError(f"{url}: bytes {first}-{last} hold a NUL character: not text")
    tokenize = tokenizer(vocab)
    try:
        data = normalized(data)
        if data and not data.endswith(b"\n"):
            data += b"\n"  # the final line of a file without a trailing newline
        if not data.isascii():  # words are cut at ASCII bytes: UTF-8 text gives UTF-8 words
            data.decode("utf-8")
        chunk = ENCODERS[kind](data, tokenize) if data.strip() else EncodedChunk.empty()
    except UnicodeDecodeError as err:
        raise CorpusFormatError(f"{url}: bytes {first}-{last} are not UTF-8 text: {err}") from err
    chunk.source_bytes = stop - start
    return in_vocab(chunk, vocab)


def in_vocab(chunk: EncodedChunk, vocab: Vocab | None) -> EncodedChunk:
    """The chunk in ``vocab``'s ids (as it is without a vocabulary or if it has them already)."""
    if vocab is None or chunk.words is None:
        return chunk
    words = b" ".join(chunk.words).decode("utf-8").split(" ") if chunk.words else []
    ids, oov_tokens = vocab.encode_local(words, chunk.ids)
    return EncodedChunk(None, ids, chunk.doc_lengths, chunk.source_bytes, oov_tokens)
