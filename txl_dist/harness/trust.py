"""Harness task files are code: what `txl-eval --tasks` lets a task file from elsewhere run.

A task YAML's `!function` imports and runs Python from a file beside it, and its Jinja templates
render in the harness's plain environment, where `{{ cycler.__init__.__globals__.os }}` reaches a
shell. Unless `--trust-task-code`, a `!function` of a task file outside the harness's own tasks is
refused, and every template renders in Jinja's sandbox, which refuses such attributes. The
harness's own tasks are code installed with it: their functions run as the harness runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import lm_eval.tasks
import lm_eval.tasks._yaml_loader as yaml_loader
import lm_eval.utils
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

TRUST_FLAG = "--trust-task-code"
HARNESS_TASKS = Path(lm_eval.tasks.__file__).parent.resolve()


class UntrustedTaskCode(ValueError):
    """A task file asked to run code, and the command line did not trust it to."""


@contextlib.contextmanager
def task_code(trusted: bool) -> Iterator[None]:
    """While inside, task files run code only as `trusted` allows (see the module)."""
    if trusted:
        yield
        return
    imports, templates = yaml_loader._import_func_in_yml, lm_eval.utils.env
    yaml_loader._import_func_in_yml = refusing_outside_the_harness(imports)
    lm_eval.utils.env = sandboxed(templates)
    try:
        yield
    except SecurityError as err:
        raise UntrustedTaskCode(
            f"a task's template asked for what only code may do ({err}); {TRUST_FLAG} renders "
            "it as it is (only for task files you trust)"
        ) from None
    finally:
        yaml_loader._import_func_in_yml, lm_eval.utils.env = imports, templates


def refusing_outside_the_harness(import_function):
    """The harness's `!function` importer, refusing a task file outside its own tasks."""

    def guarded(qualified_name: str, base_dir: Path):
        if not Path(base_dir).resolve().is_relative_to(HARNESS_TASKS):
            raise UntrustedTaskCode(
                f"a task file in {base_dir} asks for `!function {qualified_name}`, which runs "
                f"Python code; {TRUST_FLAG} runs it (only for task files you trust)"
            )
        return import_function(qualified_name, base_dir)

    return guarded


def sandboxed(environment) -> SandboxedEnvironment:
    """Jinja's sandbox with the harness environment's settings and filters."""
    sandbox = SandboxedEnvironment(
        loader=environment.loader,
        undefined=environment.undefined,
        keep_trailing_newline=environment.keep_trailing_newline,
    )
    sandbox.filters.update(environment.filters)
    return sandbox
