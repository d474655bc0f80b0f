"""One log path: the engine and the data pipeline log through `logging`; a command sends it here.

Rank 0 tells the story on stdout; every rank reports warnings and errors on stderr, so an event
reaches the terminal once, not once per rank. Of the libraries, only the console chatter of
DeepSpeed (its INFO and WARNING lines, e.g. "Setting accelerator to CPU" from every rank) and
wandb (its banner and the run history it draws at the end) is held back, unless `verbose`:
their errors still show, and torch's and fsspec's settings are left alone.
"""

from __future__ import annotations

import logging
import os
import sys

OUR_LOGGERS = ("txl_dist", "data_pipeline")
DEEPSPEED_LOGGER = "DeepSpeed"


def configure_logging(is_main: bool | None = None, verbose: bool = False) -> None:
    """Rank 0 (RANK unset or 0 when `is_main` is None) logs from INFO, other ranks from WARNING;
    unless `verbose`, DeepSpeed logs only errors and wandb draws no banner or run history."""
    if is_main is None:
        is_main = os.environ.get("RANK", "0") == "0"
    stdout = logging.StreamHandler(sys.stdout)
    stdout.addFilter(lambda record: record.levelno < logging.WARNING)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.WARNING)
    for handler in (stdout, stderr):
        handler.setFormatter(logging.Formatter("[txl-dist] %(message)s"))
    for name in OUR_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [stdout, stderr]
        logger.setLevel(logging.INFO if is_main else logging.WARNING)
        logger.propagate = False
    _quiet_libraries(not verbose)


def ranks(count: int) -> str:
    """`1 rank`, `2 ranks`: how many ranks, for a line or a README."""
    return f"{count} rank" if count == 1 else f"{count} ranks"


def hold_back_deepspeed() -> None:
    """DeepSpeed's logger keeps to errors from now on: its import says "Setting accelerator to
    CPU" before a command has parsed its arguments (it headed `txl-export --help`);
    configure_logging(verbose=True) lets it speak again."""
    _quiet_libraries(True)


def libraries_quiet() -> bool:
    """Whether DeepSpeed and wandb are held back (wandb's runs ask when they start)."""
    return _errors_only in logging.getLogger(DEEPSPEED_LOGGER).filters


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def _quiet_libraries(quiet: bool) -> None:
    """A filter rather than a level: DeepSpeed sets its logger's level when it is imported, which
    may come after this."""
    deepspeed = logging.getLogger(DEEPSPEED_LOGGER)
    deepspeed.removeFilter(_errors_only)
    if quiet:
        deepspeed.addFilter(_errors_only)
