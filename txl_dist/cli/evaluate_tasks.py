"""txl-eval's harness mode (--tasks): its arguments and its run, lm-evaluation-harness tasks on
one export through txl_dist.harness (the harness extra, imported only when asked for)."""

from __future__ import annotations

import argparse
import os
import sys

from data_pipeline import DataError
from txl_dist.cli import USAGE_ERROR
from txl_dist.exports.loading import EVAL_ROWS


def add_task_args(p: argparse.ArgumentParser, source: argparse._MutuallyExclusiveGroup) -> None:
    """--tasks, a source beside --data and --text, and the harness's own flags."""
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


def check_task_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The harness's flags only with --tasks, --include-path a directory, no sweep."""
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
