"""A run as people read it: every step (and map instance) with its status, attempt, result or
reason, why it waits, and its execution's worker and timings. Shared by the REST API and the
admin's run page.

The engine hears of a step's end, not of its start; a READY step whose execution a worker has
started is shown RUNNING. A sub_workflow step's row names the child run its attempt started
(``child_run_id``; None for other steps, and before the child exists).
"""

from __future__ import annotations

from typing import Any

from scheduler.models import Execution
from workflows import engine
from workflows.definitions import StepKind
from workflows.models import WorkflowRun
from workflows.runs import StepRef
from workflows.subworkflows import parent_step_label


def _timings(run: WorkflowRun, refs: list[tuple[str, int | None, int]]) -> dict:
    job_ids = {engine.task_job_id(run.run_id, StepRef(key, index), attempt): (key, index)
               for key, index, attempt in refs if attempt}
    executions = Execution.objects.filter(job_id__in=list(job_ids)).only(
        "job_id", "execution_id", "status", "started_at", "finished_at", "worker_id")
    return {job_ids[e.job_id]: e for e in executions}


def _step_row(key: str, index: int | None, step: dict, waiting: dict | None,
              execution: Execution | None, children: dict[str, Any]) -> dict[str, Any]:
    status_now = step["status"]
    if status_now == "READY" and execution is not None and execution.status == "RUNNING":
        status_now, waiting = "RUNNING", None  # the engine hears of ends; a worker started it
    duration = None
    if execution is not None and execution.started_at and execution.finished_at:
        duration = round((execution.finished_at - execution.started_at).total_seconds() * 1000)
    return {
        "key": key, "map_index": index, "status": status_now, "attempt": step.get("attempt", 0),
        "result": step.get("result"), "reason": step.get("reason"), "waiting": waiting,
        "execution_id": None if execution is None else str(execution.execution_id),
        "worker_id": None if execution is None else execution.worker_id,
        "started_at": None if execution is None else execution.started_at,
        "finished_at": None if execution is None else execution.finished_at,
        "duration_ms": duration,
        "child_run_id": _child_of(children, key, index, step.get("attempt", 0)),
    }


def _child_of(children: dict[str, Any], key: str, index: int | None,
              attempt: int) -> str | None:
    child = children.get(parent_step_label(StepRef(key, index), attempt)) if children else None
    return None if child is None else str(child)


def run_steps(run: WorkflowRun) -> list[dict[str, Any]]:
    """The run's steps as the API and the admin show them (map instances after their step)."""
    steps = run.state.get("steps", {})
    refs = [(key, None, step.get("attempt", 0)) for key, step in steps.items()]
    for key, step in steps.items():
        refs += [(key, i, inst.get("attempt", 0))
                 for i, inst in enumerate(step.get("instances") or [])]
    executions = _timings(run, refs)
    waiting = engine.waiting_of(run)
    children = engine.child_runs_of(run) if _has_sub_workflows(run) else {}
    rows = []
    for key, step in steps.items():
        rows.append(_step_row(key, None, step, waiting.get(key), executions.get((key, None)),
                              children))
        for i, instance in enumerate(step.get("instances") or []):
            rows.append(_step_row(key, i, instance, None, executions.get((key, i)), children))
    return rows


def _has_sub_workflows(run: WorkflowRun) -> bool:
    return any(step.kind is StepKind.SUB_WORKFLOW
               for step in engine.definition_of(run.definition).steps)
