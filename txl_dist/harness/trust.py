"""Harness task files are code: what `txl-eval --tasks` lets a task file from elsewhere run.

A task YAML's `!function` imports and runs Python from a file beside it, and its Jinja templates
render in the harness's plain environment, where `{{ cycler.__init__.__globals__.os }}` reaches a
shell. Unless `--trust-task-code`, a `!function` of a task file outside the harness's own tasks is
refused, and every template renders in Jinja's sandbox, which refuses such attributes. The
harness's own tasks are code installed with it: their functions run as the harness runs.

A third route: a `metric:` the harness's registry lacks (or any with `hf_evaluate: true`) goes to
`evaluate.load(name)`, which imports a script by that path (or `name/name.py` under the working
directory) or fetches one from the Hub. Unless trusted, only the registry's metrics are given, for
the harness's own tasks too (what evaluate would run comes from the Hub, not with the harness).

Trusted or not, a task whose `dataset_path` is a dataset script's folder (which the datasets
library no longer runs) is one line naming the task's file, not the library's traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import lm_eval.api.metrics  # noqa: F401 (fills the registry of metrics it holds)
import lm_eval.api.task as task_module
import lm_eval.tasks
import lm_eval.tasks._yaml_loader as yaml_loader
import lm_eval.utils
from jinja2.exceptions import SecurityError
from lm_eval.api.registry import metric_registry

from txl_dist.harness.sandbox import BoundedSandbox, bounded

TRUST_FLAG = "--trust-task-code"
DATASET_SCRIPTS = "Dataset scripts are no longer supported"
"""How the datasets library (4 and later) refuses a dataset script."""
HARNESS_TASKS = Path(lm_eval.tasks.__file__).parent.resolve()


class UntrustedTaskCode(ValueError):
    """A task file asked to run code, and the command line did not trust it to."""


class UnregisteredMetric(Exception):
    """A task asked for a metric only `evaluate.load` would give (named by the task's check)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@contextlib.contextmanager
def task_code(trusted: bool) -> Iterator[None]:
    """While inside, task files run code only as `trusted` allows (see the module)."""
    imports, templates = yaml_loader._import_func_in_yml, lm_eval.utils.env
    metrics, task_init = task_module.get_metric, task_module.ConfigurableTask.__init__
    task_module.ConfigurableTask.__init__ = naming_the_task_file(task_init)
    if not trusted:
        yaml_loader._import_func_in_yml = refusing_outside_the_harness(imports)
        lm_eval.utils.env = sandboxed(templates)
        task_module.get_metric = registered_only(metrics)
    try:
        yield
    except SecurityError as err:
        raise UntrustedTaskCode(
            f"a task's template asked for what Jinja's sandbox refuses ({err}); {TRUST_FLAG} "
            "renders it as it is (only for task files you trust)"
        ) from None
    finally:
        yaml_loader._import_func_in_yml, lm_eval.utils.env = imports, templates
        task_module.get_metric, task_module.ConfigurableTask.__init__ = metrics, task_init


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


def sandboxed(environment) -> BoundedSandbox:
    """Jinja's sandbox, bounded, with the harness environment's settings and filters."""
    sandbox = BoundedSandbox(
        loader=environment.loader,
        undefined=environment.undefined,
        keep_trailing_newline=environment.keep_trailing_newline,
    )
    sandbox.filters.update(environment.filters)
    return bounded(sandbox)


def registered_only(get_metric):
    """The harness's `get_metric`, refusing what only `evaluate.load` would give."""

    def guarded(name, hf_evaluate_metric: bool = False):
        if hf_evaluate_metric or not isinstance(name, str) or name not in metric_registry:
            raise UnregisteredMetric(str(name))
        return get_metric(name, hf_evaluate_metric)

    return guarded


def naming_the_task_file(init):
    """A task's constructor whose unregistered metric is refused, and whose dataset script is
    one line, naming the task and its file."""

    def checked(self, *args, config: dict | None = None, **kwargs) -> None:
        named = config or {}
        source = (named.get("metadata") or {}).get("config_source", "inline")
        task = f"task {named.get('task')!r} ({source})"
        try:
            init(self, *args, config=config, **kwargs)
        except UnregisteredMetric as err:
            raise UntrustedTaskCode(
                f"{task} asks for metric {err.name!r}, which is not the harness's own: "
                "evaluate.load would run a script of that name (a local file or the Hub's); "
                f"{TRUST_FLAG} loads it (only for task files you trust)"
            ) from None
        except RuntimeError as err:
            if not str(err).startswith(DATASET_SCRIPTS):
                raise
            raise ValueError(
                f"{task}: its dataset_path {named.get('dataset_path')!r} is a dataset script "
                f"({str(err).rpartition(' ')[2]!r}), which the datasets library no longer runs; "
                "point it at data files (dataset_path: json, dataset_kwargs.data_files)"
            ) from None

    return checked
