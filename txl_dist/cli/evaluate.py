"""txl-eval: perplexity (or bits per character) of an exported model on a split or a text file.

    txl-eval --model OUT_DIR --data DATA_ROOT_OR_MANIFEST_URL [--split test] [options]
    txl-eval --model OUT_DIR --text FILE [options]
    txl-eval --model A [--model B ...] --data ROOT --split valid --sweep-mem-len 16,32,64,128
    txl-eval --model OUT_DIR --tasks T1[,T2] [--include-path DIR] [--output-path DIR] \\
        [--num-fewshot N] [--limit N]      (lm-evaluation-harness tasks; the harness extra)
    torchrun --nproc_per_node 2 -m txl_dist.cli.evaluate ...    (rows split over the ranks)
    python -m txl_dist.cli.evaluate ...

Every token but the first is scored exactly once, with the config's evaluation lengths (the
paper's: eval_tgt_len, eval_mem_len, eval_clamp_len, eval_same_length) unless overridden by
--tgt-len, --mem-len, --clamp-len, --same-length. Rows are independent streams that start
without memory, so the perplexity depends on --batch-size; by default the training run's
evaluation rows and precision (the export's data.json), so it reproduces the engine's
evaluation. A text file is tokenized as WikiText: whitespace-split lines, each followed by
<eos>, unknown words as the unknown token; for a model of subword data, by its export's
tokenizer.json, the whole file as one document after the data's end-of-text token (as every
training document and harness request), so its first token is scored too.
Character-level data (the manifest's level) is reported in bits per character (loss / ln 2),
other data in perplexity per word, or per subword token where the export has a tokenizer.json
(the report's level: char, word or subword).

A sweep (--sweep-mem-len or --sweep-clamp-len) scores every length in one run, reading the
data once, and reports each model's effective context and, for several --model, their RECL.

--tasks runs lm-evaluation-harness tasks (its flags' names and meanings, underscores accepted)
on one rank, with the memory kept (txl_dist.harness): it prints the harness's table and writes
its results JSON under --output-path. Task files are code: a `!function` of one outside the
harness's own tasks and a metric outside the harness's registry are refused and templates render
in Jinja's sandbox, unless --trust-task-code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass

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
from txl_dist.cli import USAGE_ERROR, interruptible
from txl_dist.evaluation.context import RECL_THRESHOLD, write_csv
from txl_dist.evaluation.loop import evaluate
from txl_dist.evaluation.scores import TOKEN_OF_LEVEL, format_score, reported_level, score
from txl_dist.evaluation.sweep import (
    SweepResult,
    run_sweep,
    table,
    to_json,
)
from txl_dist.exports.loading import (
    DTYPES,
    EVAL_ROWS,
    check_rows,
    export_evaluation,
    export_level,
    export_vocabulary,
    load_for_evaluation,
)
from txl_dist.exports.text import read_text
from txl_dist.model import TransformerXL
from txl_dist.model.transformer import VOCAB_FILE
from txl_dist.process.allocator import keep_freed_memory
from txl_dist.process.dist import World, end_distributed, init_distributed, world_from_env
from txl_dist.process.threads import choose_threads


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="txl-eval",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=SWEEP_HELP,
    )
    p.add_argument(
        "--model", required=True, action="append",
        help="directory written by txl-export (repeat it to sweep a group of models)",
    )  # fmt: skip
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="prepared dataset root (or a split's manifest.json URL)")
    source.add_argument("--text", help="raw text file in words, scored over all its tokens")
    source.add_argument("--tasks", help="lm-evaluation-harness tasks, comma-separated")
    harness = p.add_argument_group("lm-evaluation-harness (with --tasks)")
    harness.add_argument(
        "--include-path", "--include_path",
        help="directory of task YAMLs; task files are code: a !function is refused and "
        "templates render in Jinja's sandbox unless --trust-task-code",
    )  # fmt: skip
    harness.add_argument(
        "--trust-task-code", action="store_true",
        help="let task files run code (!function, templates outside the sandbox, metrics "
        "evaluate.load gives): only for task files you trust",
    )  # fmt: skip
    harness.add_argument("--output-path", "--output_path", help="directory for the results JSON")
    harness.add_argument("--num-fewshot", "--num_fewshot", type=int, help="few-shot examples")
    harness.add_argument("--limit", type=float, help="documents per task (below 1: a fraction)")
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
    sweep = p.add_mutually_exclusive_group()
    sweep.add_argument("--sweep-mem-len", type=_lengths, metavar="L1,L2,...", help="sweep mem_len")
    sweep.add_argument(
        "--sweep-clamp-len", type=_lengths, metavar="L1,L2,...", help="sweep clamp_len"
    )
    p.add_argument(
        "--threshold", type=float, default=RECL_THRESHOLD,
        help="sweep: effective-context and RECL threshold (default 0.01)",
    )  # fmt: skip
    p.add_argument(
        "--recl-r", type=_fractions, default=[0.1, 0.5, 1.0], metavar="R1,R2,...",
        help="sweep of several models: RECL's fractions of hardest tokens (default 0.1,0.5,1.0)",
    )  # fmt: skip
    p.add_argument("--out", help="sweep: also write the rows to this CSV file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    args.lengths = args.sweep_mem_len or args.sweep_clamp_len
    args.sweep = "mem_len" if args.sweep_mem_len else "clamp_len" if args.lengths else None
    if args.batch_size is not None and args.batch_size < 1:
        p.error("--batch-size must be at least 1")
    if args.sweep is None and (len(args.model) > 1 or args.out):
        p.error("several --model and --out need a sweep: add --sweep-mem-len or --sweep-clamp-len")
    harness_flags = (args.include_path, args.output_path, args.num_fewshot, args.limit)
    if not args.tasks and (args.trust_task_code or any(f is not None for f in harness_flags)):
        p.error(
            "--include-path, --output-path, --num-fewshot, --limit and --trust-task-code go "
            "with --tasks"
        )
    if args.include_path is not None and not os.path.isdir(args.include_path):
        p.error(f"--include-path {args.include_path} is not a directory of task YAML files")
    if args.tasks and args.sweep:
        p.error("--tasks runs harness tasks, not a sweep: drop --sweep-mem-len/--sweep-clamp-len")
    if len(set(args.model)) < len(args.model):
        p.error("give each --model once")
    if not 0 < args.threshold < 1:
        p.error(f"--threshold must be in (0, 1), got {args.threshold}")
    return args


SWEEP_HELP = """\
sweeps:
  --sweep-mem-len 0,32,64,128 scores the split at each memory length (the other lengths as
  above); --sweep-clamp-len=-1,16,... does the same for clamp_len (-1: no clamp; write it with
  "=" as it starts with a dash). The data is read once.
  Output: a table (--json: rows of mem_len, clamp_len, attn_len, loss, ppl or bpc, tokens),
  --out CSV.
  attn_len is the most tokens a prediction is conditioned on: mem_len with same_length,
  mem_len + tgt_len without. The swept context is attn_len for a memory sweep and clamp_len
  (-1 counting as attn_len) for a clamp sweep. With same_length, a memory sweep's mem_len 0
  row (marked "*", segment_alone in --json and --out) is the segment alone: causal, no
  memory, same_length off, at context 0; the other rows stay same-length.

  effective context (each model): the shortest swept context whose loss is at most
  (1 + --threshold) times the loss at the longest swept context.

  RECL (several --model, a group): Dai et al. 2019's relative effective context length
  (section 4.3, appendix C). With b(c, t) the smallest loss any model of the group has on token
  t at context c, and T the fraction r of tokens with the largest b(c, t), a model's relative
  loss is f(c, c') = mean over T of min(b(c, t), loss(c', t)) and its gain
  g(c, c') = 1 - exp(f(c, c') - f(c, c)). Starting at the shortest context c and taking c' as
  the next swept one, RECL is the first c with g(c, c') < --threshold (">=" when the gain
  never fell below it). Sweep evenly spaced contexts, as the paper steps c by a fixed delta.
  Every model must score the same tokens: same --tgt-len and contexts (same_length).
"""


def _lengths(text: str) -> list[int]:
    try:
        lengths = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        lengths = []
    if not lengths or lengths[0] < -1:
        raise argparse.ArgumentTypeError(
            f"need comma-separated lengths >= 0 (clamp: -1 for none), got {text!r}"
        )
    return lengths


def _fractions(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"need fractions in (0, 1], got {text!r}")
    return values


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


def sweep(args: argparse.Namespace, world: World, device: torch.device) -> SweepResult:
    first = load_model(args.model[0], args, device)
    _, batches, _, level = batches_for(args, first, world)  # segments of the first model's tgt_len
    loaded = {args.model[0]: first}  # the others are loaded one at a time, in their turn

    def load(path: str) -> TransformerXL:
        return loaded.pop(path) if path in loaded else load_model(path, args, device)

    return run_sweep(
        load, args.model, batches, device, args.sweep, args.lengths, args.threshold,
        args.recl_r, progress=world.is_main and not args.no_progress, level=level,
    )  # fmt: skip


@interruptible("txl-eval")
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if argv is None:  # the command, not a caller's main([...]): it sets the whole process's
        keep_freed_memory()  # allocator (as training: page faults cost a fifth of the time)
        if world_from_env().world_size == 1:  # ranks choose theirs in init_distributed
            choose_threads()  # a busy machine's cores, not torch's one thread per core
    if args.tasks:
        return harness_tasks(args)
    try:
        rows, dtype = export_evaluation(args.model[0], torch.device(args.device))
    except ValueError as err:
        print(f"txl-eval: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    args.batch_size, args.dtype = args.batch_size or rows, args.dtype or dtype
    world = world_from_env()
    device = torch.device(args.device)
    if world.world_size > 1:
        device = init_distributed(world)
    try:
        if args.sweep:
            output = sweep(args, world, device)
            if world.is_main and args.out:
                write_csv(output.rows, args.out)
        else:
            output = run(args, world, device)
    except (DataError, FileNotFoundError, ValueError) as err:
        print(f"txl-eval: error: {err}", file=sys.stderr)
        end_distributed(together=False)  # another rank may have failed elsewhere
        return USAGE_ERROR
    end_distributed()
    if world.is_main:
        print(render(output, args.json))
    return 0


def harness_tasks(args: argparse.Namespace) -> int:
    """--tasks: the harness's table on stdout, its results JSON under --output-path."""
    try:
        from txl_dist.harness import TXLM
        from txl_dist.harness.tasks import TaskRun, run_tasks
    except ImportError as err:
        hint = "pip install -e '.[harness]' in the checkout"
        print(f"txl-eval: error: --tasks needs lm_eval ({err}): {hint}", file=sys.stderr)
        return USAGE_ERROR
    run = TaskRun(
        [t for t in args.tasks.split(",") if t], args.include_path, args.output_path,
        args.num_fewshot, args.limit, args.trust_task_code,
    )  # fmt: skip
    try:
        model = TXLM(
            args.model[0], args.batch_size or EVAL_ROWS, args.device, args.dtype or "fp32",
            args.tgt_len, args.mem_len,
            args.clamp_len, None if args.same_length is None else args.same_length == "true",
        )  # fmt: skip
        output = run_tasks(model, args.model[0], run)
    except (DataError, FileNotFoundError, ValueError, KeyError, OSError) as err:
        message = err.args[0] if isinstance(err, KeyError) else err  # a KeyError's str quotes it
        print(f"txl-eval: error: {message}", file=sys.stderr)
        return USAGE_ERROR
    print(output.table())
    if output.path:
        print(f"results: {output.path}")
    return 0


def render(output: EvalReport | SweepResult, as_json: bool) -> str:
    if isinstance(output, SweepResult):
        return json.dumps(to_json(output)) if as_json else table(output)
    if as_json:
        return json.dumps(asdict(output))
    scores = {k: v for k, v in (("ppl", output.ppl), ("bpc", output.bpc)) if v is not None}
    shown = format_score(scores, digits=3 if output.ppl is not None else 4)
    if output.ppl is not None:  # bits per character say their unit
        shown += f" per {TOKEN_OF_LEVEL[output.level]}"
    return (
        f"{output.source}: loss {output.loss:.4f}  {shown}  "
        f"({output.tokens} tokens, {output.tokens_per_s:,.0f} tokens/s)"
    )


if __name__ == "__main__":
    sys.exit(main())
