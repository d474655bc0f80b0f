"""`txl-eval --tasks`: harness tasks run through the harness's own evaluator, its table printed and
its results JSON written, as its `lm-eval run` does (which cannot load a model of our package).

Task files run code only as trust.py allows. The harness writes its results JSON into a private
directory; it is copied from there into --output-path as a new file, never through a link planted
where the harness would have written (OUTPUT/<model name>/)."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from lm_eval import simple_evaluate
from lm_eval.loggers import EvaluationTracker
from lm_eval.tasks import TaskManager
from lm_eval.utils import make_table

from txl_dist.files import directory, open_new
from txl_dist.harness.lm import TXLM
from txl_dist.harness.trust import task_code


@dataclass
class TaskRun:
    """Which harness tasks to run and where their results go (the harness's flags)."""

    tasks: list[str]
    """Task names, or paths of task YAML files."""
    include_path: str | None = None
    """A directory of further task YAML files (the harness's --include_path)."""
    output_path: str | None = None
    """Directory (or .json file) for the results JSON; none written without it."""
    num_fewshot: int | None = None
    """Examples in each prompt's few-shot context (default: each task's own)."""
    limit: float | None = None
    """Documents per task: a count, or below 1 a fraction."""
    trust_task_code: bool = False
    """Let task files run code: `!function`s and templates outside Jinja's sandbox."""


@dataclass
class TaskResults:
    """What the harness returned, and where its results JSON went."""

    results: dict
    """The harness's results (its JSON's content)."""
    path: str | None
    """The results JSON written under output_path, or None without one."""

    def table(self) -> str:
        """The harness's results table (and its groups' table when tasks form groups)."""
        tables = [make_table(self.results)]
        if "groups" in self.results:
            tables.append(make_table(self.results, "groups"))
        return "\n".join(tables)


def run_tasks(model: TXLM, pretrained: str, run: TaskRun) -> TaskResults:
    """Evaluate `model` (exported in `pretrained`) on `run`'s tasks."""
    limit = None if run.limit is None else int(run.limit) if run.limit >= 1 else run.limit
    with tempfile.TemporaryDirectory(prefix="txl-eval-results-") as private:
        staged = os.path.join(private, os.path.basename(run.output_path or ""))
        tracker = EvaluationTracker(output_path=staged)
        with task_code(run.trust_task_code):
            results = simple_evaluate(
                model=model,
                model_args={"pretrained": pretrained},
                tasks=run.tasks,
                num_fewshot=run.num_fewshot,
                batch_size=model.batch_size,
                limit=limit,
                task_manager=task_manager(run),
                evaluation_tracker=tracker,
                log_samples=False,
            )
        if not run.output_path:
            return TaskResults(results, None)
        tracker.save_results_aggregated(results=results, samples=None)
        written = results_path(tracker, staged)
        if not os.path.exists(written):  # the tracker logs a failure instead of raising
            raise OSError(f"the harness could not write its results under {run.output_path}")
        path = results_path(tracker, run.output_path)
        if not run.output_path.endswith(".json"):  # OUTPUT/<model name>/, a planted link replaced
            os.makedirs(run.output_path, exist_ok=True)
            directory(os.path.dirname(path))
        return TaskResults(results, placed(written, path))


def placed(written: str, path: str) -> str:
    """`path`, a new file holding the results JSON `written` (never written through a link)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(written, "rb") as source, open_new(path, "wb") as target:
        shutil.copyfileobj(source, target)
    return path


def task_manager(run: TaskRun) -> TaskManager:
    """The harness's index of tasks: --include-path alone when it holds every task asked for
    (reading the built-in tasks' thousands of YAML files takes seconds), else with them."""
    if run.include_path:
        local = TaskManager(include_path=run.include_path, include_defaults=False)
        if all(local.match_tasks([task]) for task in run.tasks):
            return local
    return TaskManager(include_path=run.include_path)


def results_path(tracker: EvaluationTracker, output_path: str) -> str:
    """Where the tracker writes its results JSON for `output_path`."""
    if output_path.endswith(".json"):
        return f"{output_path.removesuffix('.json')}_{tracker.date_id}.json"
    name = tracker.general_config_tracker.model_name_sanitized
    return os.path.join(output_path, name, f"results_{tracker.date_id}.json")
