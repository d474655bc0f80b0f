"""Reading ahead: blocks of batches produced in a daemon thread, a bounded queue ahead of
the consumer; no thread outlives the interpreter."""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class Block:
    """Consecutive steps of one epoch for this rank's rows, read in one go."""

    epoch: int
    """Epoch of these steps."""
    first_step: int
    """Step number of the block's first batch."""
    tokens: np.ndarray
    """int32 [rows_per_rank, block width + 1]."""
    valid: np.ndarray
    """Input positions of each row that hold real tokens (rest is padding)."""


class Prefetcher:
    """Runs a block iterator in a daemon thread, a bounded queue ahead of the consumer."""

    live: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, blocks: Iterator[Block], depth: int):
        self.queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(blocks,), daemon=True)
        self.thread.name = "txl-data-prefetch"
        Prefetcher.live.add(self)
        self.thread.start()

    def run(self, blocks: Iterator[Block]) -> None:
        """Producer: every block, then None; an exception is handed over instead."""
        try:
            for block in blocks:
                if not self.put(block):
                    return
            self.put(None)
        except BaseException as err:  # handed to the consumer, which re-raises it
            self.put(err)

    def put(self, item) -> bool:
        """Queue an item unless stopped; False once the consumer is gone."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[Block]:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop and join the thread (it notices within 0.1 s)."""
        self.stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=10)


@atexit.register
def _stop_prefetchers() -> None:
    """No prefetch thread outlives the interpreter's shutdown."""
    for prefetcher in list(Prefetcher.live):
        prefetcher.close()
