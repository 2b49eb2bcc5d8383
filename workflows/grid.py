"""Runs × steps of one workflow definition, as a grid: the last runs as columns (oldest on the
left, as time reads), the definition's steps as rows, each cell the step's state in that run
with its duration. The admin's definition page draws it (Airflow's grid view, which users
compare with).

Two queries, whatever the number of runs and steps: the runs (their JSON state holds every
step's status and attempt, see :mod:`workflows.runs`), through ``workflow_run_definition_idx``
(definition, newest first: the last N runs of a definition with millions of runs are an index
range, not a sort), and the executions of the steps' current attempts, by the deterministic job
ids of :func:`workflows.engine.task_job_id`, for durations. A map step's cell counts its
instances (done / all) instead of a duration.
"""

from __future__ import annotations

from typing import Any

from scheduler.models import Execution
from workflows import engine
from workflows.models import WorkflowDefinitionVersion, WorkflowRun
from workflows.runs import StepRef
from workflows.states import StepStatus

DEFAULT_RUNS = 25
MAX_RUNS = 100

_TERMINAL = {s.value for s in StepStatus if s.is_terminal}


def run_grid(version: WorkflowDefinitionVersion, *, runs: int = DEFAULT_RUNS) -> dict[str, Any]:
    """The last ``runs`` runs of ``version``, oldest first: ``runs`` (the columns: id,
    status, created_at, duration_ms) and ``rows``, one per step in the definition's order, each
    with a cell per run (status, attempt, duration_ms, instances, run_id)."""
    steps = list(engine.definition_of(version).order)
    rows = list(
        WorkflowRun.objects.filter(tenant_id=version.tenant_id, definition=version)
        .order_by("-created_at")
        .only("run_id", "status", "state", "created_at", "started_at", "finished_at")[:runs]
    )
    rows.reverse()
    executions = _executions(rows)
    return {
        "runs": [{
            "run_id": str(run.run_id),
            "status": run.status,
            "created_at": run.created_at,
            "duration_ms": _ms(run.started_at, run.finished_at),
        } for run in rows],
        "rows": [{"step": key,
                  "cells": [{**_cell(run, key, executions), "run_id": str(run.run_id)}
                            for run in rows]}
                 for key in steps],
    }


def _attempt_job(run: WorkflowRun, key: str, step: dict) -> Any:
    attempt = step.get("attempt", 0)
    return engine.task_job_id(run.run_id, StepRef(key), attempt) if attempt else None


def _executions(runs: list[WorkflowRun]) -> dict[Any, Execution]:
    """The latest execution of each step's current attempt, by job id."""
    job_ids = [job_id for run in runs for key, step in run.state.get("steps", {}).items()
               if step.get("instances") is None
               and (job_id := _attempt_job(run, key, step)) is not None]
    found: dict[Any, Execution] = {}
    if not job_ids:
        return found
    for execution in (Execution.objects.filter(job_id__in=job_ids)
                      .only("job_id", "status", "started_at", "finished_at")
                      .order_by("job_id", "scheduled_for")):
        found[execution.job_id] = execution  # the later attempt of an occurrence wins
    return found


def _cell(run: WorkflowRun, key: str, executions: dict[Any, Execution]) -> dict[str, Any]:
    step = run.state.get("steps", {}).get(key)
    if step is None:  # a run whose state predates a step (it cannot: runs keep their version)
        return {"status": None, "attempt": 0, "duration_ms": None, "instances": None}
    status = step.get("status")
    instances = step.get("instances")
    cell: dict[str, Any] = {"status": status, "attempt": step.get("attempt", 0),
                            "duration_ms": None, "instances": None}
    if instances is not None:
        done = sum(1 for i in instances if i.get("status") in _TERMINAL)
        cell["instances"] = f"{done}/{len(instances)}"
        return cell
    job_id = _attempt_job(run, key, step)
    execution = executions.get(job_id) if job_id is not None else None
    if execution is not None:
        if status == StepStatus.READY and execution.status == "RUNNING":
            cell["status"] = StepStatus.RUNNING.value  # the engine hears of ends, not starts
        cell["duration_ms"] = _ms(execution.started_at, execution.finished_at)
    return cell


def _ms(start, end) -> int | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000)
