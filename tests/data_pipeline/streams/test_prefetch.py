"""The prefetch thread: one per iteration, stopped by close, never keeping the interpreter."""

import sys
import threading

from data_pipeline import Reading, TokenStreams
from tests.processes import run


def test_prefetch_threads_stop(wt103_valid):
    def prefetchers():
        return [t for t in threading.enumerate() if t.name == "txl-data-prefetch"]

    stream = TokenStreams(wt103_valid, 2, 50, reading=Reading(prefetch=1, block_tokens=200))
    it = iter(stream)
    next(it)
    assert len(prefetchers()) == 1
    stream.close()
    assert prefetchers() == []
    it = iter(stream)
    next(it)
    iter(stream)  # a new iteration replaces the old one's thread
    assert len(prefetchers()) == 1
    stream.close()
    assert prefetchers() == []


def test_interpreter_exits_with_an_unclosed_stream(wt103_valid):
    script = (
        "from data_pipeline import Reading, TokenStreams\n"
        f"s = TokenStreams({wt103_valid!r}, 2, 50, reading=Reading(prefetch=1, block_tokens=200))\n"
        "it = iter(s)\n"
        "next(it)\n"
        "print('left open')\n"
    )
    done = run([sys.executable, "-c", script], timeout=60)
    assert done.returncode == 0 and "left open" in done.stdout, done.stderr
