"""txl-eval's scoring of one export on a split (--data) or a text file (--text): the arguments
they share with the other modes (lengths, rows, dtype, device) and the run."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from data_pipeline import (
    TOKENIZER_FILE,
    DataError,
    Subword,
    TextBatches,
    TokenStreams,
    Vocab,
    load_manifest,
    manifest_url,
)
from txl_dist.evaluation.loop import evaluate
from txl_dist.evaluation.scores import reported_level, score
from txl_dist.exports.loading import (
    DTYPES,
    EVAL_ROWS,
    check_rows,
    export_level,
    export_vocabulary,
    load_for_evaluation,
)
from txl_dist.exports.text import read_text
from txl_dist.model import TransformerXL
from txl_dist.model.pretrained import VOCAB_FILE
from txl_dist.process.dist import World


@dataclass
class EvalReport:
    """What txl-eval prints (one JSON object with --json)."""

    source: str
    """The split's manifest URL or the text file."""
    level: str
    """The data's level: char, word, or subword (data of the export's tokenizer.json)."""
    loss: float
    """Mean NLL per scored token (nats)."""
    ppl: float | None
    """exp(loss), for word-level data (else null)."""
    bpc: float | None
    """Bits per character, loss / ln 2, for char-level data (else null)."""
    tokens: int
    """Tokens scored."""
    tokens_per_s: float
    """Scoring throughput."""
    seconds: float
    """Wall-clock time of the scoring."""
    settings: dict
    """Lengths, rows and dtype used."""


def check_data_vocab(url: str, vocab: Vocab | Subword | None, model_dir: str) -> None:
    """Refuse a split prepared with another vocabulary than the model's vocab.txt (or
    tokenizer.json)."""
    manifest = load_manifest(url)
    if vocab is not None and manifest.vocab_sha256 != vocab.sha256:
        name, flag = (
            (TOKENIZER_FILE, "--tokenizer")
            if isinstance(vocab, Subword)
            else (VOCAB_FILE, "--vocab")
        )
        raise DataError(
            f"{url} was prepared with another vocabulary (sha256 {manifest.vocab_sha256[:12]}) "
            f"than {model_dir}'s {name} ({vocab.sha256[:12]}); prepare it with {flag}"
        )


def add_source_args(source: argparse._MutuallyExclusiveGroup) -> None:
    """--data and --text, two of the sources only one of which a command line names."""
    source.add_argument("--data", help="prepared dataset root (or a split's manifest.json URL)")
    source.add_argument("--text", help="raw text file in words, scored over all its tokens")


def add_scoring_args(p: argparse.ArgumentParser) -> None:
    """The split, the lengths, rows, dtype and device every mode scores with."""
    p.add_argument("--split", default="test", help="split of --data (default test)")
    p.add_argument("--tgt-len", type=int, help="segment length (default: eval_tgt_len)")
    p.add_argument("--mem-len", type=int, help="memory length (default: eval_mem_len)")
    p.add_argument(
        "--clamp-len", type=int, help="relative distance clamp (default: eval_clamp_len)"
    )
    p.add_argument("--same-length", choices=("true", "false"), help="default: eval_same_length")
    p.add_argument(
        "--batch-size", type=int,
        help=f"rows scored in parallel, over all ranks (default: the training run's evaluation "
        f"rows; {EVAL_ROWS} for an export that does not record them)",
    )  # fmt: skip
    p.add_argument(
        "--dtype", choices=sorted(DTYPES),
        help="compute dtype (default: the training run's; fp32 for an export that does not say)",
    )  # fmt: skip
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")


def check_scoring_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse fewer than one row."""
    if args.batch_size is not None and args.batch_size < 1:
        p.error("--batch-size must be at least 1")


def load_model(path: str, args: argparse.Namespace, device: torch.device) -> TransformerXL:
    """The exported model with the command line's lengths and dtype."""
    same_length = None if args.same_length is None else args.same_length == "true"
    lengths = dict(
        tgt_len=args.tgt_len, mem_len=args.mem_len, clamp_len=args.clamp_len,
        same_length=same_length,
    )  # fmt: skip
    return load_for_evaluation(path, device, args.dtype, **lengths, check=args.sweep is None)


def batches_for(args: argparse.Namespace, model: TransformerXL, world: World):
    """(source name, this rank's evaluation batches, unknown words of --text, the data's level)
    of --text or --data.

    Every --model's vocabulary is checked against the data's.
    """
    if args.batch_size % world.world_size:
        raise ValueError(
            f"--batch-size {args.batch_size} must be a multiple of the {world.world_size} ranks"
        )
    tgt_len, rows = model.config.tgt_len, args.batch_size
    if args.text:
        ids, unknown = read_text(args.text, args.model[0])
        check_rows(rows, len(ids), args.text)
        batches = TextBatches(ids, rows, tgt_len, world.rank, world.world_size)
        return args.text, batches, unknown, export_level(args.model[0])
    url = args.data if args.data.endswith(".json") else manifest_url(args.data, args.split)
    for path in args.model:
        check_data_vocab(url, export_vocabulary(path), path)
    check_rows(rows, load_manifest(url).tokens, url)
    streams = TokenStreams(
        url, rows_per_rank=rows // world.world_size, tgt_len=tgt_len, rank=world.rank,
        world_size=world.world_size, tail=True, expected_vocab_size=model.config.n_token,
    )  # fmt: skip
    # The export's tokenizer.json, checked above to be the data's, tells subword data apart.
    subword = export_level(args.model[0]) == "subword"
    return url, streams, None, reported_level(streams.manifest.level, subword)


def run(args: argparse.Namespace, world: World, device: torch.device) -> EvalReport:
    model = load_model(args.model[0], args, device)
    cfg = model.config
    settings = dict(
        tgt_len=cfg.tgt_len, mem_len=cfg.mem_len, clamp_len=cfg.clamp_len,
        same_length=cfg.same_length, batch_size=args.batch_size, dtype=args.dtype,
    )  # fmt: skip
    source, batches, unknown, level = batches_for(args, model, world)
    if unknown is not None:
        settings["unknown_words"] = unknown
    progress = world.is_main and not args.no_progress
    result = evaluate(model, batches, device, progress=progress)
    scores = {"ppl": None, "bpc": None, **score(result.loss, level)}
    return EvalReport(
        source=source, level=level, loss=result.loss, **scores, tokens=result.tokens,
        tokens_per_s=result.tokens / max(result.seconds, 1e-9), seconds=result.seconds,
        settings=settings,
    )  # fmt: skip
