"""One log path: the engine and the data pipeline log through `logging`; a command sends it here.

Rank 0 tells the story on stdout; every rank reports warnings and errors on stderr, so an event
reaches the terminal once, not once per rank. Only our own loggers are configured: libraries
(DeepSpeed, torch, fsspec) keep their own settings.
"""

from __future__ import annotations

import logging
import os
import sys

OUR_LOGGERS = ("txl_dist", "data_pipeline")


def configure_logging(is_main: bool | None = None) -> None:
    """Rank 0 (RANK unset or 0 when `is_main` is None) logs from INFO, other ranks from WARNING."""
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
