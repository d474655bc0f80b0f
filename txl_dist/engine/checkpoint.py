"""Checkpoints: DeepSpeed states + per-rank memories and RNG, an atomic `latest`, keep-last-K.

Layout of `{out_dir}/checkpoints/`:
    global_step{N}/            DeepSpeed's model / optimizer files for step N
    global_step{N}/txl.json    CheckpointState: step, stream position, config, vocab, world size,
                               and the size and CRC-32 of every other file of the checkpoint
    global_step{N}/memory_rank{r}.pt   rank r's memories (with their first global row) and RNG
    global_step{N}_universal/  DeepSpeed's universal conversion, for another world size
    latest                     the newest complete tag

A save writes `global_step{N}.partial/`, fsyncs and records every file, then renames it to
`global_step{N}` and only then replaces `latest`: a kill at any moment leaves `latest` naming a
complete checkpoint. Conversions are written the same way. A resume checks the record and, with
`--resume auto`, passes over a damaged newest checkpoint to the previous intact one.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from txl_dist.config import ConfigError
from txl_dist.engine.memory import MemoryBank

CHECKPOINT_DIR = "checkpoints"  # inside train.out_dir
LATEST = "latest"
CLIENT_FILE = "txl.json"
TAG_PATTERN = re.compile(r"^global_step(\d+)$")
PARTIAL = ".partial"  # suffix of a directory being written; renamed away when complete
UNIVERSAL = "_universal"  # suffix of a checkpoint's universal conversion
# Everything a checkpoint leaves in the directory: its tag, conversion, and unfinished writes.
ENTRY_PATTERN = re.compile(rf"^global_step(\d+)({UNIVERSAL})?({re.escape(PARTIAL)})?$")
STATE_VERSION = 1  # of CheckpointState; files without a version are version 0
# Tests set it to a step: that save stops once this rank's files are written, before anything
# is recorded or published, so a test can kill the ranks inside the save.
PAUSE_IN_SAVE_ENV = "TXL_TEST_PAUSE_IN_SAVE"
DIGEST_CHUNK = 16 << 20
DIGEST_THREADS = 4  # zlib.crc32 releases the GIL: files are checked in parallel
# DeepSpeed's ds_to_universal refuses checkpoints whose client state lacks this.
UNIVERSAL_INFO = {"universal_checkpoint_info": {"universal_checkpoint_version": 0.2}}
# Earlier torch releases have known bypasses of the weights_only unpickler (CVE-2025-32434
# before 2.6; CVE-2026-24747, memory corruption, before 2.10).
MIN_SAFE_TORCH = (2, 10)
# Globals outside torch's weights_only defaults that txl-dist's own checkpoints contain, listed
# from real checkpoints (DeepSpeed 0.19, torch 2.13): ZeRO 0-3, fp32 and bf16, one and two
# ranks, and their universal conversions. ZeRO 0 and the memory files hold none.
CHECKPOINT_GLOBALS = frozenset(
    {
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",
        "deepspeed.runtime.zero.config.ZeroStageEnum",
        "deepspeed.utils.tensor_fragment.fragment_address",
    }
)


class UnsafeCheckpointError(Exception):
    """A checkpoint file could run code when loaded; it is refused before anything unpickles it."""


def tag_for(step: int) -> str:
    return f"global_step{step}"


class CheckpointStateError(ValueError):
    """txl.json cannot be read as a checkpoint state; the message names the file."""


class DamagedCheckpointError(FileNotFoundError):
    """A checkpoint is incomplete or its files differ from their record; the message names one."""


class CheckpointSaveError(RuntimeError):
    """A save failed on some rank; every rank raises it and `latest` still names the last one."""


@dataclass
class CheckpointState:
    """What txl.json holds next to DeepSpeed's files: where the run is and what it trained on."""

    step: int
    """Optimizer steps done."""
    stream: dict[str, Any]
    """TokenStreams.state_dict() of the training stream: where the next batch starts."""
    world_size: int
    """Ranks that saved it; another world size loads the optimizer via the universal format."""
    global_rows: int
    """Stream rows per step over all ranks; a resume must keep them."""
    rows_per_rank: int
    """Rows per rank: memory_rank{r}.pt holds rows r * rows_per_rank onwards."""
    config: dict[str, Any]
    """The run config, RunConfig.to_dict()."""
    vocab_size: int
    """Vocabulary size of the training data."""
    vocab_sha256: str
    """sha256 of the training data's vocabulary."""
    level: str = "word"
    """The training data's level, char or word (its loss reads as bpc or ppl); older
    checkpoints, from before char-level data, lack it."""
    run_id: str | None = None
    """Run id (wandb's too), kept across resumes; version 0 files may lack it."""
    requeues: int = 0
    """How many times SLURM requeued the job that trained up to this checkpoint."""
    restarts: int = 0
    """How many times the run was resumed (any launcher) before this checkpoint."""
    slurm_job_id: str | None = None
    """The SLURM job that saved it, if any."""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Every other file of the checkpoint by relative path: {"bytes": size, "crc32": hex};
    empty in checkpoints saved before txl-dist recorded them, and in the client state DeepSpeed
    keeps (written before the files existed)."""
    version: int = STATE_VERSION
    """Layout version of this record."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str, source: str) -> CheckpointState:
        """Parse txl.json (any version up to ours; `source` names it in errors)."""
        values = json.loads(text)
        version = values.setdefault("version", 0)
        if version > STATE_VERSION:
            raise CheckpointStateError(
                f"{source} has checkpoint version {version}, newer than this txl-dist reads "
                f"({STATE_VERSION}): upgrade txl-dist"
            )
        # Version 0 had the same fields plus DeepSpeed's universal_checkpoint_info.
        names = {f.name for f in dataclasses.fields(cls)}
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        if missing := sorted(required - values.keys()):
            raise CheckpointStateError(
                f"{source} lacks {', '.join(missing)}: not a txl-dist checkpoint"
            )
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass
class ResumePoint:
    """A complete checkpoint to resume from."""

    directory: str
    """The checkpoints directory."""
    tag: str
    """Tag inside it, e.g. global_step200."""
    client: CheckpointState
    """What txl.json holds."""
    passed_over: list[str] = field(default_factory=list)
    """Why newer checkpoints were passed over (damaged), newest first; printed as warnings."""


def find_resume_point(resume: str | None, out_dir: str) -> ResumePoint | None:
    """`auto`: the run's newest intact checkpoint if any (passing over damaged ones with a
    warning); a path: that tag, or the `latest` of that checkpoints directory."""
    if not resume:
        return None
    if resume == "auto":
        directory = os.path.join(out_dir, CHECKPOINT_DIR)
        if not os.path.exists(os.path.join(directory, LATEST)):
            return None
        return _newest_intact(directory)
    if os.path.exists(os.path.join(resume, CLIENT_FILE)):
        return _checked_point(*os.path.split(os.path.normpath(resume)))
    if os.path.exists(os.path.join(resume, LATEST)):
        return _checked_point(resume, read_latest(resume))
    raise FileNotFoundError(
        f"--resume {resume}: neither a checkpoint (no {CLIENT_FILE}) nor a checkpoints "
        f"directory (no {LATEST}); pass auto, a checkpoints/ directory or "
        "checkpoints/global_stepN"
    )


def _newest_intact(directory: str) -> ResumePoint:
    """`latest`, or if it is damaged the newest earlier checkpoint that is intact."""
    latest = read_latest(directory)
    latest_step = int(TAG_PATTERN.match(latest).group(1))
    earlier = sorted(
        (int(m.group(1)), name)
        for name in os.listdir(directory)
        if (m := TAG_PATTERN.match(name)) and int(m.group(1)) < latest_step
    )
    damaged = []
    for tag in [latest, *(name for _, name in reversed(earlier))]:
        try:
            point = _checked_point(directory, tag)
        except DamagedCheckpointError as err:
            damaged.append(str(err))
            continue
        point.passed_over = [f"{reason}: resuming from {tag}" for reason in damaged]
        return point
    raise DamagedCheckpointError(f"{damaged[0]}, and no earlier checkpoint is intact")


def _checked_point(directory: str, tag: str) -> ResumePoint:
    """The checkpoint `tag` once its files match their record and its pickles are safe."""
    tag_dir = os.path.join(directory, tag)
    client_path = os.path.join(tag_dir, CLIENT_FILE)
    if not os.path.exists(client_path):
        raise DamagedCheckpointError(f"{client_path} missing: checkpoint {tag} is incomplete")
    with open(client_path) as f:
        text = f.read()
    try:
        client = CheckpointState.from_json(text, client_path)
    except json.JSONDecodeError as err:
        raise DamagedCheckpointError(f"{client_path} is damaged: not JSON ({err})") from err
    if problem := damage(tag_dir, client.files):
        raise DamagedCheckpointError(f"checkpoint {tag_dir} is damaged: {problem}")
    check_pickles(tag_dir)  # before DeepSpeed or we unpickle anything
    return ResumePoint(directory, tag, client)


def damage(tag_dir: str, files: dict[str, dict[str, Any]]) -> str | None:
    """How the files in `tag_dir` differ from their record, or None if they match.

    Sizes first, so a truncated file shows without reading anything; then every CRC-32.
    Checkpoints saved before txl-dist recorded their files have no record: nothing to check.
    """
    for name, recorded in files.items():
        path = os.path.join(tag_dir, name)
        if os.path.isabs(name) or os.path.normpath(name).startswith(".."):
            return f"{CLIENT_FILE} records {name!r}, a path outside the checkpoint"
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return f"{name} is missing"
        if not stat.S_ISREG(info.st_mode):
            return f"{name} is not a regular file"
        if info.st_size != recorded["bytes"]:
            return f"{name} has {info.st_size} bytes, {CLIENT_FILE} records {recorded['bytes']}"
    found = digests(tag_dir, list(files), sync=False)
    for name, recorded in files.items():
        if found[name]["crc32"] != recorded["crc32"]:
            return (
                f"{name} has CRC-32 {found[name]['crc32']}, {CLIENT_FILE} records "
                f"{recorded['crc32']}"
            )
    return None


def digests(root: str, names: list[str], sync: bool) -> dict[str, dict[str, Any]]:
    """Size and CRC-32 of each file (fsynced too if `sync`), read in parallel."""
    with ThreadPoolExecutor(DIGEST_THREADS) as pool:
        found = pool.map(lambda name: _digest(os.path.join(root, name), sync), names)
        return dict(zip(names, found))


def _digest(path: str, sync: bool) -> dict[str, Any]:
    crc, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(DIGEST_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
        if sync:  # flushes the file whichever process wrote it
            os.fsync(f.fileno())
    return {"bytes": size, "crc32": f"{crc:08x}"}


def needs_universal(point: ResumePoint | None, world_size: int, zero_stage: int) -> bool:
    """A ZeRO checkpoint from another world size loads only via DeepSpeed's universal format."""
    return point is not None and point.client.world_size != world_size and zero_stage > 0


def check_resumable(point: ResumePoint, global_rows: int, vocab_sha256: str) -> None:
    """Raise ConfigError if the checkpoint cannot continue a run with these rows and data."""
    saved = point.client
    if saved.global_rows != global_rows:
        raise ConfigError(
            f"checkpoint {point.tag} was trained with train.global_rows={saved.global_rows}, "
            f"this run has {global_rows}; the stream position and memories only continue with "
            "the same global rows"
        )
    if saved.vocab_sha256 != vocab_sha256:
        raise ConfigError(
            f"checkpoint {point.tag} was trained on data with vocabulary sha256 "
            f"{saved.vocab_sha256[:12]}, data.path has {vocab_sha256[:12]}: resume on the data "
            "it was trained on (or prepare this data with that vocabulary, --vocab)"
        )


def read_latest(directory: str) -> str:
    path = os.path.join(directory, LATEST)
    with open(path) as f:
        tag = f.read().strip()
    if not TAG_PATTERN.match(tag):  # a tag is a directory name: never a path elsewhere
        raise FileNotFoundError(f"{path} names {tag[:80]!r}, not a global_stepN checkpoint tag")
    return tag


def check_pickles(directory: str) -> None:
    """Refuse a checkpoint whose .pt files name any global outside CHECKPOINT_GLOBALS.

    torch's scanner reads the pickle opcodes without running them (and rejects opcodes it does
    not know), so this is safe on any file; DeepSpeed's loaders, which unpickle with
    weights_only=False, run only on directories that passed.
    """
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) < MIN_SAFE_TORCH:
        raise UnsafeCheckpointError(
            f"torch {torch.__version__} has known ways around its safe unpickler; loading "
            f"checkpoints needs torch>={'.'.join(map(str, MIN_SAFE_TORCH))}"
        )
    for path in _pickle_files(directory):
        try:
            unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        except Exception as err:  # noqa: BLE001 - anything the scanner cannot read is refused
            raise UnsafeCheckpointError(
                f"{path}: refused, not a torch.save file that can be checked without running it "
                f"({type(err).__name__}: {err})"
            ) from err
        unsafe -= CHECKPOINT_GLOBALS
        if unsafe:
            raise UnsafeCheckpointError(
                f"{path}: refused, its pickle calls {sorted(unsafe)[0]}, which txl-dist "
                "checkpoints never contain; load only checkpoints of your own runs (share exports)"
            )


def _pickle_files(directory: str):
    """Every .pt file under `directory`, through linked directories (each visited once)."""
    seen = set()
    for root, dirs, files in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        yield from sorted(os.path.join(root, name) for name in files if name.endswith(".pt"))


def load_trusted(path: str) -> Any:
    """torch.load with the weights_only unpickler, allowing the globals our checkpoints hold."""
    allowed = [_resolve(name) for name in sorted(CHECKPOINT_GLOBALS)]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def _resolve(qualified: str) -> Any:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def rng_state() -> dict[str, Any]:
    """RNG states in plain types and tensors, so the file loads with weights_only=True."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": (name, keys.tolist(), pos, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(
    engine,
    directory: str,
    state: CheckpointState,
    memory: MemoryBank,
    first_row: int,
    keep_last: int,
    needed_bytes: float,
) -> str:
    """Write a complete checkpoint for `state.step` from every rank; returns its tag.

    Raises CheckpointSaveError on every rank if any rank fails (a full disk says so with
    `needed_bytes`, an estimate of one checkpoint); the partial directory is then removed.
    """
    saving = _Saving(directory, tag_for(state.step), needed_bytes)
    rank = dist.get_rank()
    saving.on_every_rank(saving.clear if rank == 0 else lambda: None)
    saving.on_every_rank(lambda: _write_rank_files(engine, saving, state, memory, first_row))
    if os.environ.get(PAUSE_IN_SAVE_ENV) == str(state.step):
        while True:  # until the test kills this rank
            time.sleep(60)
    staging = saving.staging
    # Each rank sees at least its own files (a shared filesystem may cache listings per node).
    views = saving.on_every_rank(lambda: _files_under(staging))
    names = sorted(set().union(*views))
    shares = saving.on_every_rank(
        lambda: digests(staging, names[rank :: dist.get_world_size()], sync=True)
    )
    files = dict(sorted(item for share in shares for item in share.items()))
    saving.on_every_rank(
        lambda: saving.publish(dataclasses.replace(state, files=files)) if rank == 0 else None
    )
    if rank == 0:
        prune(directory, keep_last, state.run_id)
    dist.barrier()
    return saving.tag


def _write_rank_files(
    engine, saving: _Saving, state: CheckpointState, memory: MemoryBank, first_row: int
) -> None:
    """This rank's DeepSpeed files and memories, into the partial directory."""
    client = {**dataclasses.asdict(state), **UNIVERSAL_INFO}
    partial = os.path.basename(saving.staging)
    try:
        engine.save_checkpoint(
            saving.directory, tag=partial, client_state=client, save_latest=False
        )
    except Exception:
        # DeepSpeed's save ends with a barrier, which this rank skipped by failing in a write
        # (its collectives come before them); take it so the ranks stay in step.
        dist.barrier()
        raise
    torch.save(
        {"first_row": first_row, "memory": memory.rows_state(), "rng": rng_state()},
        os.path.join(saving.staging, f"memory_rank{dist.get_rank()}.pt"),
    )


def _files_under(root: str) -> list[str]:
    """Paths of every file under `root`, relative to it, sorted (the same list on every rank)."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), root)
        for folder, _, names in os.walk(root)
        for name in names
    )


@dataclass
class _Saving:
    """One save in progress: its place, how every rank's parts agree, how it ends or is undone."""

    directory: str
    """The checkpoints directory."""
    tag: str
    """The tag being saved."""
    needed_bytes: float
    """An estimate of one checkpoint's size, for the message when the disk is full."""

    @property
    def staging(self) -> str:
        return os.path.join(self.directory, self.tag + PARTIAL)

    @property
    def latest_staging(self) -> str:
        return os.path.join(self.directory, LATEST + PARTIAL)

    def clear(self) -> None:
        """Make room for this save: a failed save of the same step left its directory."""
        os.makedirs(self.directory, exist_ok=True)
        shutil.rmtree(self.staging, ignore_errors=True)

    def on_every_rank(self, work: Callable[[], Any]) -> list[Any]:
        """Run `work` here, gather every rank's result; if any rank failed, undo and raise."""
        try:
            outcome = (work(), None, False)
        except Exception as err:  # noqa: BLE001 - every failure ends the save on every rank
            outcome = (None, f"{type(err).__name__}: {err}", _out_of_space(err))
        outcomes = [None] * dist.get_world_size()
        dist.all_gather_object(outcomes, outcome)
        failed = [(rank, error, full) for rank, (_, error, full) in enumerate(outcomes) if error]
        if failed:
            self._undo()
            rank, error, _ = failed[0]
            out_of_space = any(full for _, _, full in failed)
            raise CheckpointSaveError(self._failure(rank, error, out_of_space))
        return [value for value, _, _ in outcomes]

    def _undo(self) -> None:
        """Remove what this save wrote; every rank waits for it, then `latest` is as before."""
        if dist.get_rank() == 0:
            shutil.rmtree(self.staging, ignore_errors=True)
            if os.path.exists(self.latest_staging):
                os.remove(self.latest_staging)
        dist.barrier()

    def _failure(self, rank: int, error: str, out_of_space: bool) -> str:
        """The one line that ends the run."""
        latest = os.path.join(self.directory, LATEST)
        if os.path.exists(latest):
            kept = f"{LATEST} still names {read_latest(self.directory)}"
        else:
            kept = "no earlier checkpoint"
        free = shutil.disk_usage(self.directory).free
        if out_of_space or free < self.needed_bytes:
            return (
                f"no space left in {self.directory} for checkpoint {self.tag}: one checkpoint "
                f"needs about {self.needed_bytes:,.0f} bytes, {free:,} are free; free space or "
                f"move train.out_dir, then continue with --resume auto ({kept})"
            )
        where = f"checkpoint {self.tag} in {self.directory}"
        return f"saving {where} failed on rank {rank}: {error} ({kept})"

    def publish(self, state: CheckpointState) -> None:
        """Record the files, then make the checkpoint visible and point `latest` at it."""
        final = os.path.join(self.directory, self.tag)
        _write_synced(os.path.join(self.staging, CLIENT_FILE), state.to_json())
        _write_synced(self.latest_staging, self.tag)
        _fsync(self.staging)
        # Nothing from here on needs space. A checkpoint of this step saved before (the run
        # was resumed from an earlier one) is replaced, and so is its conversion.
        for stale in (final, final + UNIVERSAL):
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(self.staging, final)
        os.replace(self.latest_staging, os.path.join(self.directory, LATEST))
        _fsync(self.directory)


def _out_of_space(err: BaseException | None) -> bool:
    """ENOSPC or EDQUOT anywhere in the chain (torch.save reports it as a bare RuntimeError)."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        err = err.__cause__ or err.__context__
    return False


def _write_synced(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: str) -> None:
    """Make a file's data, or a directory's entries (new files, renames), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: str) -> None:
    """Make every file and directory entry under `root` durable."""
    for folder, _, names in os.walk(root):
        for name in names:
            _fsync(os.path.join(folder, name))
        _fsync(folder)


def prune(directory: str, keep_last: int, run_id: str | None) -> None:
    """Delete all but the newest `keep_last` complete checkpoints of run `run_id` (with their
    conversions), incomplete ones and leftovers of failed writes before them; another run's
    checkpoints (resumed from elsewhere) are not ours to delete."""
    latest = read_latest(directory)
    latest_step = int(TAG_PATTERN.match(latest).group(1))
    tags = sorted(
        (int(m.group(1)), name) for name in os.listdir(directory) if (m := TAG_PATTERN.match(name))
    )
    runs = {name: _run_of(os.path.join(directory, name)) for _, name in tags}
    ours = [name for _, name in tags if runs[name] is not False and runs[name] == run_id]
    keep = set(ours[-keep_last:]) | {latest}
    for step, name in tags:
        deletable = runs[name] is False or runs[name] == run_id
        if name not in keep and step <= latest_step and deletable:
            shutil.rmtree(os.path.join(directory, name + UNIVERSAL), ignore_errors=True)
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    for name in os.listdir(directory):
        m = ENTRY_PATTERN.match(name)
        if m and m.group(3) and int(m.group(1)) <= latest_step:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _run_of(tag_dir: str) -> str | None | bool:
    """The run id a complete checkpoint belongs to; False for a partial one (no txl.json)."""
    path = os.path.join(tag_dir, CLIENT_FILE)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return CheckpointState.from_json(f.read(), path).run_id


def load_memories(
    point: ResumePoint, rows_per_rank: int, rank: int
) -> tuple[list | None, dict | None]:
    """This rank's memory rows from whichever saved ranks held them, and its own RNG state.

    Rows are global, so the saving world size does not matter as long as the global rows match.
    The RNG state is returned only when this rank existed with the same rows before.
    """
    start, stop = rank * rows_per_rank, (rank + 1) * rows_per_rank
    pieces, rng = [], None
    saved_world = point.client.world_size
    for saved_rank in range(saved_world):
        path = os.path.join(point.directory, point.tag, f"memory_rank{saved_rank}.pt")
        saved = load_trusted(path)
        memory = saved["memory"]
        if memory is None:
            return None, None
        first, count = saved["first_row"], memory[0].size(0)
        if first == start and count == rows_per_rank:
            rng = saved["rng"]
        lo, hi = max(start, first), min(stop, first + count)
        if lo < hi:
            pieces.append([layer[lo - first : hi - first] for layer in memory])
    rows = [torch.cat([piece[i] for piece in pieces]) for i in range(len(pieces[0]))]
    return rows, rng


def convert_to_universal(point: ResumePoint) -> str:
    """Convert a ZeRO checkpoint for a new world size (rank 0 runs it); returns the new tag.

    The converter writes under a temporary name, renamed once it is complete and synced: an
    existing conversion is a finished one.
    """
    universal = f"{point.tag}{UNIVERSAL}"
    output = os.path.join(point.directory, universal)
    if dist.get_rank() == 0 and not os.path.exists(output):
        staging = output + PARTIAL
        shutil.rmtree(staging, ignore_errors=True)  # an interrupted conversion's
        subprocess.run(
            [
                sys.executable,
                "-m",
                "deepspeed.checkpoint.ds_to_universal",
                "--input_folder",
                os.path.join(point.directory, point.tag),
                "--output_folder",
                staging,
            ],
            check=True,
        )
        _fsync_tree(staging)
        os.replace(staging, output)
        _fsync(point.directory)
    dist.barrier()
    check_pickles(output)  # it may have come with the checkpoint rather than from the converter
    return universal
