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

This module reads the command line and hands it to its mode: evaluate_data.py (--data, --text),
evaluate_sweep.py (--sweep-*), evaluate_tasks.py (--tasks).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

import torch

from data_pipeline import DataError
from txl_dist.cli import USAGE_ERROR, interruptible
from txl_dist.cli.evaluate_data import (
    EvalReport,
    add_scoring_args,
    add_source_args,
    check_scoring_args,
    run,
)
from txl_dist.cli.evaluate_sweep import SWEEP_HELP, add_sweep_args, check_sweep_args, sweep
from txl_dist.cli.evaluate_tasks import add_task_args, check_task_args, harness_tasks
from txl_dist.evaluation.context import write_csv
from txl_dist.evaluation.scores import TOKEN_OF_LEVEL, format_score
from txl_dist.evaluation.sweep import SweepResult, table, to_json
from txl_dist.exports.loading import export_evaluation
from txl_dist.process.allocator import keep_freed_memory
from txl_dist.process.dist import end_distributed, init_distributed, world_from_env
from txl_dist.process.threads import choose_threads


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Each mode adds its arguments and checks them together once parsed."""
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
    add_source_args(source)
    add_task_args(p, source)
    add_scoring_args(p)
    add_sweep_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    check_scoring_args(p, args)
    check_sweep_args(p, args)
    check_task_args(p, args)
    if len(set(args.model)) < len(args.model):
        p.error("give each --model once")
    return args


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
