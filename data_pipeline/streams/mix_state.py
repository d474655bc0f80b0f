"""A mix's saved stream state checked before it is used: it may come from a checkpoint someone
else made (or damaged), and its numbers index shares, epochs and corpora."""

from __future__ import annotations

from data_pipeline.streams.geometry import ORDERS

STATE_KIND = "mix"
STATE_VERSIONS = (1, 2)
MAX_COUNT = 1 << 53
"""Counts, steps and seeds above this are refused: the schedule compares counts as float64,
exact only up to 2**53."""
FIX = (
    "the checkpoint is damaged or was edited: resume from another checkpoint (--resume PATH) "
    "or start the run anew"
)


class StreamStateError(ValueError):
    """A saved stream state that cannot be this stream's position; the message names the key."""


def whole(value: object, key: str, low: int, high: int) -> int:
    """``value`` if it is an int in [low, high], else StreamStateError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise StreamStateError(
            f"stream state {key} is {shown}, not a whole number in [{low}, {high}]; {FIX}"
        )
    return value


def check_mix_state(
    state: object, names: list[str], shares: list[int], global_rows: int, tgt_len: int
) -> None:
    """Raise StreamStateError, naming the key, unless ``state`` is a mix state of corpora
    ``names`` with ``shares`` (tokens per row and epoch), ``global_rows`` and ``tgt_len`` whose
    every value the stream can stand at."""
    if not isinstance(state, dict) or state.get("kind") != STATE_KIND:
        raise StreamStateError(
            "stream state is of one corpus (data.path), this stream mixes corpora "
            "(data.mix); resume a run with the data it was trained on"
        )
    for key in ("version", "step", "seed", "order", "global_rows", "tgt_len", "corpora", "rows"):
        if key not in state:
            raise StreamStateError(f"stream state has no {key}; {FIX}")
    for key, mine in (("global_rows", global_rows), ("tgt_len", tgt_len), ("corpora", names)):
        if state[key] != mine:
            raise StreamStateError(
                f"stream state has {key}={state[key]!r:.80}, this stream {mine}; resume with the "
                "same global rows (world_size x rows_per_rank), tgt_len and data.mix names"
            )
    version = state["version"]
    if isinstance(version, bool) or version not in STATE_VERSIONS:
        raise StreamStateError(
            f"stream state version {version!r:.40} is not one of {STATE_VERSIONS}; {FIX}"
        )
    step = whole(state["step"], "step", 0, MAX_COUNT)
    whole(state["seed"], "seed", 0, (1 << 64) - 1)
    if state["order"] not in ORDERS:
        raise StreamStateError(
            f"stream state order {state['order']!r:.40} is not one of {ORDERS}; {FIX}"
        )
    rows = state["rows"]
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise StreamStateError(f"stream state rows is not a list of lists of numbers; {FIX}")
    if len(rows) != global_rows:
        raise StreamStateError(
            f"stream state has {len(rows)} rows, its global_rows says {global_rows}; {FIX}"
        )
    for g, values in enumerate(rows):
        check_row(values, f"rows[{g}]", version, shares, step * tgt_len)


def check_row(values: list, key: str, version: int, shares: list[int], tokens: int) -> None:
    """One row's cursor: its corpus (or document), epochs, offsets and counts in range; no
    share read more often than ``tokens`` (the tokens a row has read by the state's step)
    allows."""
    k = len(shares)
    fields = 4 if version >= 2 else 2
    if len(values) != 1 + fields * k:
        raise StreamStateError(
            f"stream state {key} has {len(values)} values, a version {version} row of {k} "
            f"corpora has {1 + fields * k}; {FIX}"
        )
    whole(values[0], f"{key}[0]", 0, k - 1 if version >= 2 else MAX_COUNT)
    for c, share in enumerate(shares):
        epoch = whole(values[1 + c], f"{key}[{1 + c}]", 0, tokens // share + 1)
        offset = whole(values[1 + k + c], f"{key}[{1 + k + c}]", 0, share - 1)
        if version >= 2:
            whole(values[1 + 2 * k + c], f"{key}[{1 + 2 * k + c}]", 0, MAX_COUNT)
            skipped = values[1 + 3 * k + c]
            whole(skipped, f"{key}[{1 + 3 * k + c}]", 0, offset if epoch == 0 else share - 1)
