"""What the engine writes for one batch of runs, in one prepared statement.

The rows are named tuples: a 10,000-way fan-out builds 40,000 of them in one batch, and a tuple
is made several times faster than a frozen dataclass.

Carrying out the evaluations of a batch (every run whose step ends one listener pass applies)
writes the step jobs of the dispatches and retries, a watch and a :class:`~workflows.models.
WorkflowTask` per job, an audit row per step transition and run end, and each run's new state.
They go as one statement of data-modifying CTEs over ``unnest`` of array parameters, prepared
once per connection (:mod:`scheduler.prepared`): one round trip and one plan for the batch,
whatever its size. Django's ``bulk_create`` and ``bulk_update`` took five statements, each
parsed and planned again, and ``bulk_update``'s ``CASE WHEN`` per row and field cost the
worker's main process more than the rest of the engine together (measured with py-spy under
``chrono bench workflow``: 27 % of the process's samples in these writes, 17 % in
``bulk_update``'s expression building alone).

Every insert is ``ON CONFLICT DO NOTHING``: a step job is keyed by ``task_job_id(run, step,
attempt)``, so a decision carried out twice inserts one job, one watch, one task row.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.core.serializers.json import DjangoJSONEncoder

from scheduler import prepared
from scheduler.prepared import array
from search.audit import AUDIT_TABLE

# Step jobs are attempts: the evaluator owns the retry policy.
SINGLE_ATTEMPT = {"max_attempts": 1}
_SINGLE_ATTEMPT_JSON = json.dumps(SINGLE_ATTEMPT)
JOB_NAME_LENGTH = 200  # chrono_job.name


class StepJob(NamedTuple):
    """The one-time job of one attempt of a step, due at ``fire_at``."""

    job_id: uuid.UUID
    tenant_id: uuid.UUID
    name: str
    task: str
    fire_at: datetime
    soft_timeout_ms: int | None
    hard_timeout_ms: int | None
    args: list
    kwargs: dict
    queue: str


class TaskRow(NamedTuple):
    """Which run, step (map instance) and attempt a job, or a child run's end, belongs to."""

    job_id: uuid.UUID
    run_id: uuid.UUID
    step_key: str
    map_index: int | None
    attempt: int


class AuditRow(NamedTuple):
    tenant_id: uuid.UUID
    occurred_at: datetime
    action: str
    outcome: str
    job_id: uuid.UUID | None
    actor: str
    message: str
    data: dict[str, Any]


class RunRow(NamedTuple):
    """A run's new state, as :data:`RUN_STATE_FIELDS` of its row."""

    run_id: uuid.UUID
    state: dict[str, Any]
    status: str
    reason: dict[str, Any] | None
    state_version: int
    finished_at: datetime | None


@dataclass
class Writes:
    """What carrying out the evaluations of several runs writes."""

    jobs: list[StepJob] = field(default_factory=list)
    # Dispatches whose task the tenant is not granted: their step fails, no job is written.
    refused: set[tuple[Any, int]] = field(default_factory=set)
    tasks: list[TaskRow] = field(default_factory=list)
    audits: list[AuditRow] = field(default_factory=list)
    runs: list[RunRow] = field(default_factory=list)

    def timers(self) -> list[tuple[str, int]]:
        """The step jobs' timers ``(job id, fire ms)``, for the timer store after commit."""
        return [(str(job.job_id), _ms(job.fire_at)) for job in self.jobs]


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, cls=DjangoJSONEncoder)


WRITE_SQL = f"""
WITH new_jobs AS (
  INSERT INTO chrono_job (job_id, tenant_id, name, job_type, timezone, next_run_at, status,
                          retry_count, max_retries, retry_policy, soft_timeout_ms,
                          hard_timeout_ms, args, kwargs, queue, cancelled_by)
  SELECT j.job_id, j.tenant_id, j.name, j.job_type, 'UTC', j.next_run_at, 'ACTIVE', 0, 0,
         %(retry_policy)s::jsonb, j.soft_ms, j.hard_ms, j.args, j.kwargs, j.queue, ''
  FROM unnest(%(job_ids)s::uuid[], %(job_tenants)s::uuid[], %(job_names)s::text[],
              %(job_tasks)s::text[], %(job_fire_at)s::timestamptz[], %(job_soft_ms)s::int[],
              %(job_hard_ms)s::int[], %(job_args)s::jsonb[], %(job_kwargs)s::jsonb[],
              %(job_queues)s::text[])
       AS j(job_id, tenant_id, name, job_type, next_run_at, soft_ms, hard_ms, args, kwargs,
            queue)
  ON CONFLICT DO NOTHING
), new_watches AS (
  INSERT INTO chrono_job_watch (job_id, watcher)
  SELECT unnest(%(job_ids)s::uuid[]), %(watcher)s
  ON CONFLICT DO NOTHING
), new_tasks AS (
  INSERT INTO chrono_workflow_task (job_id, run_id, step_key, map_index, attempt)
  SELECT * FROM unnest(%(task_jobs)s::uuid[], %(task_runs)s::uuid[], %(task_keys)s::text[],
                       %(task_indexes)s::int[], %(task_attempts)s::int[])
  ON CONFLICT DO NOTHING
), new_audits AS (
  INSERT INTO {AUDIT_TABLE} (tenant_id, occurred_at, action, outcome, job_id, actor, message,
                             data)
  SELECT * FROM unnest(%(audit_tenants)s::uuid[], %(audit_at)s::timestamptz[],
                       %(audit_actions)s::text[], %(audit_outcomes)s::text[],
                       %(audit_jobs)s::uuid[], %(audit_actors)s::text[],
                       %(audit_messages)s::text[], %(audit_data)s::jsonb[])
)
UPDATE chrono_workflow_run r
SET state = u.state, status = u.status, reason = u.reason, state_version = u.state_version,
    finished_at = u.finished_at
FROM unnest(%(run_ids)s::uuid[], %(run_states)s::jsonb[], %(run_statuses)s::text[],
            %(run_reasons)s::jsonb[], %(run_versions)s::int[],
            %(run_finished)s::timestamptz[])
     AS u(run_id, state, status, reason, state_version, finished_at)
WHERE r.run_id = u.run_id
"""  # nosec B608 # the one name interpolated is a module constant; every value is a parameter


def write(writes: Writes, *, watcher: str) -> None:
    """Write ``writes`` in the caller's transaction, with one statement."""
    jobs, tasks, audits, runs = writes.jobs, writes.tasks, writes.audits, writes.runs
    if not (jobs or tasks or audits or runs):
        return
    params = {
        "retry_policy": _SINGLE_ATTEMPT_JSON,
        "watcher": watcher,
        "job_ids": array(j.job_id for j in jobs),
        "job_tenants": array(j.tenant_id for j in jobs),
        "job_names": array(j.name[:JOB_NAME_LENGTH] for j in jobs),
        "job_tasks": array(j.task for j in jobs),
        "job_fire_at": array(j.fire_at for j in jobs),
        "job_soft_ms": array(j.soft_timeout_ms for j in jobs),
        "job_hard_ms": array(j.hard_timeout_ms for j in jobs),
        "job_args": array(json.dumps(j.args) for j in jobs),
        "job_kwargs": array(json.dumps(j.kwargs) for j in jobs),
        "job_queues": array(j.queue for j in jobs),
        "task_jobs": array(t.job_id for t in tasks),
        "task_runs": array(t.run_id for t in tasks),
        "task_keys": array(t.step_key for t in tasks),
        "task_indexes": array(t.map_index for t in tasks),
        "task_attempts": array(t.attempt for t in tasks),
        "audit_tenants": array(a.tenant_id for a in audits),
        "audit_at": array(a.occurred_at for a in audits),
        "audit_actions": array(a.action for a in audits),
        "audit_outcomes": array(a.outcome for a in audits),
        "audit_jobs": array(a.job_id for a in audits),
        "audit_actors": array(a.actor for a in audits),
        "audit_messages": array(a.message for a in audits),
        "audit_data": array(_json(a.data) for a in audits),
        "run_ids": array(r.run_id for r in runs),
        "run_states": array(json.dumps(r.state) for r in runs),
        "run_statuses": array(r.status for r in runs),
        "run_reasons": array(_json(r.reason) for r in runs),
        "run_versions": array(r.state_version for r in runs),
        "run_finished": array(r.finished_at for r in runs),
    }
    with prepared.cursor() as cursor:
        cursor.execute(WRITE_SQL, params,
                       rows=max(len(jobs), len(tasks), len(audits), len(runs)))
