"""`txl-eval --tasks`: harness tasks run through the harness's own evaluator, its table printed and
its results JSON written, as its `lm-eval run` does (which cannot load a model of our package)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from lm_eval import simple_evaluate
from lm_eval.loggers import EvaluationTracker
from lm_eval.tasks import TaskManager
from lm_eval.utils import make_table

from txl_dist.harness.lm import TXLM


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
    tracker = EvaluationTracker(output_path=run.output_path)
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
    path = None
    if run.output_path:
        tracker.save_results_aggregated(results=results, samples=None)
        path = results_path(tracker, run.output_path)
    return TaskResults(results, path)


def task_manager(run: TaskRun) -> TaskManager:
    """The harness's index of tasks: --include-path alone when it holds every task asked for
    (reading the built-in tasks' thousands of YAML files takes seconds), else with them."""
    if run.include_path:
        local = TaskManager(include_path=run.include_path, include_defaults=False)
        if all(local.match_tasks([task]) for task in run.tasks):
            return local
    return TaskManager(include_path=run.include_path)


def results_path(tracker: EvaluationTracker, output_path: str) -> str:
    """Where the tracker wrote its results JSON (it logs a failure instead of raising)."""
    if output_path.endswith(".json"):
        stem = output_path.removesuffix(".json")
        path = f"{stem}_{tracker.date_id}.json"
    else:
        name = tracker.general_config_tracker.model_name_sanitized
        path = os.path.join(output_path, name, f"results_{tracker.date_id}.json")
    if not os.path.exists(path):
        raise OSError(f"the harness could not write its results under {output_path}")
    return path
