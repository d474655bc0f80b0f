"""What the worker processes do with one piece (a byte range of a corpus file): count its words,
or encode it with the vocabulary. Only counts per distinct word, or final int32 ids, travel back
to the main process, whose memory so never depends on how much text passes through it.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from data_pipeline.corpora.encoding import Documents
from data_pipeline.corpora.subword import Subword
from data_pipeline.vocab import Vocab

# What a job encodes with: a word or character vocabulary, or a subword tokenizer.
Vocabulary = Vocab | Subword

Piece = tuple[str, int, int, int]  # (file URL, start, stop, usable end of the file)


@dataclass
class PieceCounts:
    """How often each word of a piece occurs."""

    words: bytes
    """Distinct words in order of first appearance, as space-separated UTF-8 text."""
    counts: np.ndarray
    """int64 occurrences of each word."""
    source_bytes: int
    """Bytes of the source file the piece accounts for (for progress)."""


@dataclass
class PieceIds:
    """A piece's documents as vocabulary ids."""

    ids: np.ndarray
    """int32 id of every token, in corpus order."""
    doc_lengths: np.ndarray
    """int64 token count of each document; sums to len(ids)."""
    oov_tokens: int
    """Tokens mapped to the unknown token that are not that token themselves."""
    bad_records: int
    """Malformed records left out (record corpora with --skip-bad-records)."""
    source_bytes: int
    """Bytes of the source file the piece accounts for (for progress)."""


# The vocabulary encode_piece maps to, set in each worker when its pool starts (fork: not copied
# through a pipe) and in the main process when it encodes by itself.
_vocab: Vocabulary | None = None


def set_vocab(vocab: Vocabulary | None) -> None:
    """Make ``vocab`` the one encode_piece uses in this process."""
    global _vocab
    _vocab = vocab


def count_piece(documents: Documents, piece: Piece, storage_options: dict) -> PieceCounts:
    """Word counts of the documents that start in a piece."""
    chunk = documents.encode_range(*piece, storage_options)
    counts = np.bincount(chunk.ids, minlength=len(chunk.words)).astype(np.int64)
    return PieceCounts(b" ".join(chunk.words), counts, chunk.source_bytes)


def encode_piece(documents: Documents, piece: Piece, storage_options: dict) -> PieceIds:
    """Ids (in the vocabulary set by set_vocab) of the documents that start in a piece."""
    chunk = documents.encode_range(*piece, storage_options, vocab=_vocab)
    return PieceIds(
        chunk.ids, chunk.doc_lengths, chunk.oov_tokens, chunk.bad_records, chunk.source_bytes
    )


def in_own_process(fn: Callable[[], object], what: str) -> object:
    """``fn()``, run in a forked process of its own: the memory it takes goes back whole when it
    ends, where this process's heap would keep it, and pass it on to every worker forked later
    (their unique memory then grows as they reuse it). An exception it raises is raised here;
    ``what`` names the work if the process dies without a word."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def run() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to answer
        try:
            send.send((True, fn()))
        except BaseException as err:  # noqa: BLE001 -- handed to the parent, which raises it
            send.send((False, err))

    child = ctx.Process(target=run, daemon=True)  # ends with this process, whatever ends it
    child.start()
    send.close()
    try:
        ok, result = receive.recv()
    except EOFError:  # killed before it could answer (out of memory, a signal)
        child.join()
        raise RuntimeError(f"{what} died (exit code {child.exitcode}); out of memory?") from None
    child.join()
    if not ok:
        raise result
    return result


def start_worker(vocab: Vocabulary | None) -> None:
    """A pool worker's start: Ctrl-C reaches the whole terminal's group, but only the parent
    answers it (in one line); the pool ends its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_vocab(vocab)


def run_pieces(
    fn: Callable, documents: Documents, pieces: list[Piece], storage_options: dict, workers: int,
    vocab: Vocabulary | None = None,
) -> Iterator:  # fmt: skip
    """``fn(documents, piece, storage_options)`` for every piece, results in order; at most 2 pieces
    per worker in flight, so memory is bounded whatever the number of pieces."""
    if isinstance(vocab, Vocab):
        vocab.table.build()  # before the fork: every worker inherits it
    if workers <= 1:
        set_vocab(vocab)
        try:
            yield from (fn(documents, p, storage_options) for p in pieces)
        finally:
            set_vocab(None)
        return
    # fork: workers start at once and inherit the vocabulary instead of unpickling it.
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=start_worker, initargs=(vocab,)) as pool:
        pending: deque = deque()
        for piece in pieces:
            pending.append(pool.apply_async(fn, (documents, piece, storage_options)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
