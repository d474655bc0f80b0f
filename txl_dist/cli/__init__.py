"""The command-line tools: a module per command, importing the library, never another command.

Every command exits with one rule:
- 0: it did what was asked (a training run stopped early by a signal and checkpointed counts:
  it resumes with --resume auto);
- 2 (`USAGE_ERROR`): it refused what it was given before doing anything: arguments, a config
  or TXL_SET entry, or a file, directory, model or dataset they name that is missing or does
  not fit; one line on stderr says what to change. argparse's own refusals exit 2 as well;
- 1 (`FAILED`): it started and then failed (a rank died, a save failed, a shard broke
  mid-run); the line says where the traceback is;
- 76 (pretrain only, `STRAGGLER_EXIT_CODE`): a rank was named a straggler under
  stragglers.policy=stop; the run checkpointed first and resumes with --resume auto;
- 130 (`INTERRUPTED`): Ctrl-C, answered by one line (`interruptible`) rather than a traceback;
  a training run instead checkpoints and exits 0.

One module per command: pretrain.py (launch/pretrain.py), inspect_model.py (txl-inspect),
export.py (txl-export), evaluate.py (txl-eval), generate.py (txl-generate), report.py
(txl-report, which reads a run's metrics through run_metrics.py, its part and no command);
txl-eval's modes are evaluate_data.py, evaluate_sweep.py and evaluate_tasks.py, which only
evaluate.py imports.
"""

import functools
import sys
from collections.abc import Callable

from txl_dist.logs import hold_back_deepspeed

hold_back_deepspeed()  # before any command imports DeepSpeed (txl-export does at import)

USAGE_ERROR = 2
"""Exit status of a refused command line, config or input."""
FAILED = 1
"""Exit status of a command that failed while running."""
INTERRUPTED = 130
"""Exit status after Ctrl-C: 128 + SIGINT, as a shell reports a command it interrupted."""


def interruptible(prog: str) -> Callable[[Callable[..., int | None]], Callable[..., int | None]]:
    """Decorate a command's main: Ctrl-C prints `prog: interrupted` and exits INTERRUPTED.

    What a command writes is staged and renamed into place, so an interrupted one leaves nothing
    half-made; the traceback would only say where in the work the key was pressed.
    """

    def decorate(main: Callable[..., int | None]) -> Callable[..., int | None]:
        @functools.wraps(main)
        def run(argv: list[str] | None = None) -> int | None:
            try:
                return main(argv)
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return INTERRUPTED

        return run

    return decorate
