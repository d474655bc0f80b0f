"""txl-eval: perplexity of an exported model on a prepared split or a raw text file.

    txl-eval --model OUT_DIR --data DATA_ROOT_OR_MANIFEST_URL [--split test] [options]
    txl-eval --model OUT_DIR --text FILE [options]
    python -m txl_dist.evaluate ...

Every token but the first is scored exactly once, with the config's evaluation lengths (the
paper's: eval_tgt_len, eval_mem_len, eval_clamp_len, eval_same_length) unless overridden by
--tgt-len, --mem-len, --clamp-len, --same-length. Rows are independent streams that start without
memory, so the perplexity depends on --batch-size; with the training run's eval rows and --dtype
(see the export's README.md) it reproduces the engine's evaluation. A text file is tokenized as
WikiText: whitespace-split lines, each followed by <eos>, unknown words as the unknown token.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass

import numpy as np
import torch

from data_pipeline.errors import DataError
from data_pipeline.shards import load_manifest, manifest_url
from data_pipeline.streams import IGNORE_INDEX, Geometry, TokenStreams
from data_pipeline.vocab import EOS, Vocab
from txl_dist.engine.evaluate import evaluate
from txl_dist.export import DTYPES, VOCAB_FILE
from txl_dist.model import TransformerXL

DEFAULT_ROWS = 10  # the reference eval.py's batch size


@dataclass
class EvalReport:
    """What txl-eval prints (one JSON object with --json)."""

    source: str
    """The split's manifest URL or the text file."""
    loss: float
    """Mean NLL per scored token (nats)."""
    ppl: float
    """exp(loss)."""
    tokens: int
    """Tokens scored."""
    tokens_per_s: float
    """Scoring throughput."""
    seconds: float
    """Wall-clock time of the scoring."""
    settings: dict
    """Lengths, rows and dtype used."""


class TextBatches:
    """Evaluation batches of token ids in memory, cut exactly as TokenStreams(tail=True) cuts."""

    def __init__(self, ids: np.ndarray, rows: int, tgt_len: int):
        if len(ids) < 2:
            raise DataError("the text has fewer than 2 tokens: nothing to score")
        self.ids = np.asarray(ids, dtype=np.int64)
        self.geometry = Geometry.of(len(ids), rows, tgt_len, tail=True)

    @property
    def steps_per_epoch(self) -> int:
        return self.geometry.steps

    def __iter__(self):
        g = self.geometry
        rows = torch.zeros(g.global_rows, g.row_stride + 1, dtype=torch.int64)
        valid = torch.tensor([g.inputs_in_row(r) for r in range(g.global_rows)])
        for r, n in enumerate(valid.tolist()):
            if n:  # n inputs need n + 1 tokens; the rest of the row is padding
                start = r * g.row_stride
                rows[r, : n + 1] = torch.from_numpy(self.ids[start : start + n + 1])
        targets = rows[:, 1:].clone()
        targets[torch.arange(g.row_stride)[None, :] >= valid[:, None]] = IGNORE_INDEX
        for step in range(g.steps):
            cols = slice(step * g.tgt_len, step * g.tgt_len + g.width(step))
            yield rows[:, cols], targets[:, cols]


def load_vocab(model_dir: str) -> Vocab | None:
    """The model directory's vocabulary, if it has one."""
    path = os.path.join(model_dir, VOCAB_FILE)
    return Vocab.load(path) if os.path.exists(path) else None


def text_ids(path: str, vocab: Vocab) -> tuple[np.ndarray, int]:
    """(ids, unknown words) of a text file tokenized as WikiText."""
    with open(path, encoding="utf-8") as f:
        words = [w for line in f for w in (*line.split(), EOS)]
    ids = vocab.encode(words)
    unk = vocab.index.get(vocab.unk, -1)
    unknown = sum(1 for w, i in zip(words, ids.tolist()) if i == unk and w != vocab.unk)
    return ids, unknown


def data_batches(
    url: str, vocab: Vocab | None, model: TransformerXL, rows: int, tgt_len: int
) -> TokenStreams:
    """Tail streams over a prepared split, checked against the model's vocabulary."""
    manifest = load_manifest(url)
    if vocab is not None and manifest.vocab_sha256 != vocab.sha256:
        raise DataError(
            f"{url} was prepared with another vocabulary (sha256 {manifest.vocab_sha256[:12]}) "
            f"than the model's vocab.txt ({vocab.sha256[:12]}); prepare it with --vocab"
        )
    return TokenStreams(
        url, rows_per_rank=rows, tgt_len=tgt_len, tail=True,
        expected_vocab_size=model.config.n_token,
    )  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="txl-eval", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="directory written by txl-export")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="prepared dataset root (or a split's manifest.json URL)")
    source.add_argument("--text", help="raw text file in words, scored over all its tokens")
    p.add_argument("--split", default="test", help="split of --data (default test)")
    p.add_argument("--tgt-len", type=int, help="segment length (default: eval_tgt_len)")
    p.add_argument("--mem-len", type=int, help="memory length (default: eval_mem_len)")
    p.add_argument(
        "--clamp-len", type=int, help="relative distance clamp (default: eval_clamp_len)"
    )
    p.add_argument("--same-length", choices=("true", "false"), help="default: eval_same_length")
    p.add_argument("--batch-size", type=int, default=DEFAULT_ROWS, help="rows scored in parallel")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="compute dtype")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error("--batch-size must be at least 1")
    return args


def load_model(args: argparse.Namespace) -> TransformerXL:
    """The exported model in eval mode with the evaluation lengths, overrides applied."""
    model = TransformerXL.from_pretrained(args.model, map_location=args.device)
    ev = model.config.for_eval()
    same_length = None if args.same_length is None else args.same_length == "true"
    model.set_lengths(
        _first(args.tgt_len, ev.tgt_len),
        _first(args.mem_len, ev.mem_len),
        _first(args.clamp_len, ev.clamp_len),
        _first(same_length, ev.same_length),
    )
    return model.to(DTYPES[args.dtype]).eval()


def _first(value, default):
    return default if value is None else value


def run(args: argparse.Namespace) -> EvalReport:
    model = load_model(args)
    vocab = load_vocab(args.model)
    cfg = model.config
    settings = dict(
        tgt_len=cfg.tgt_len, mem_len=cfg.mem_len, clamp_len=cfg.clamp_len,
        same_length=cfg.same_length, batch_size=args.batch_size, dtype=args.dtype,
    )  # fmt: skip
    if args.text:
        if vocab is None:
            raise DataError(f"{args.model} has no {VOCAB_FILE}: --text needs the vocabulary")
        ids, settings["unknown_words"] = text_ids(args.text, vocab)
        source, batches = args.text, TextBatches(ids, args.batch_size, cfg.tgt_len)
    else:
        source = args.data if args.data.endswith(".json") else manifest_url(args.data, args.split)
        batches = data_batches(source, vocab, model, args.batch_size, cfg.tgt_len)
    result = evaluate(model, batches, torch.device(args.device), progress=not args.no_progress)
    return EvalReport(
        source, result.loss, result.ppl, result.tokens,
        result.tokens / max(result.seconds, 1e-9), result.seconds, settings,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = run(args)
    except (DataError, FileNotFoundError, ValueError) as err:
        print(f"txl-eval: error: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print(
            f"{report.source}: loss {report.loss:.4f}  ppl {report.ppl:.3f}  "
            f"({report.tokens} tokens, {report.tokens_per_s:,.0f} tokens/s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
