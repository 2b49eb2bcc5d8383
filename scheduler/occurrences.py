"""PostgreSQL side of dispatch: what the beat reads and writes for a batch of claimed timers.

Three round trips per batch, whatever its size: load the jobs, insert their executions
(``SCHEDULED``, before publishing, so a worker always finds the row it must start), and after
RabbitMQ confirmed the batch, mark them ``DISPATCHED`` and move each job to its next occurrence
(one-time jobs become ``COMPLETED``) with conditional updates, in one transaction.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from scheduler.clock import datetime_to_ms, ms_to_datetime
from scheduler.models import JobStatus


@dataclass(frozen=True, slots=True)
class DueJob:
    """The fields of a job the beat needs to publish one of its occurrences."""

    job_id: str
    tenant_id: str
    job_type: str
    args: list
    kwargs: dict
    queue: str
    cron_expression: str | None
    timezone: str
    status: str
    next_run_ms: int | None

    @property
    def is_active(self) -> bool:
        return self.status == JobStatus.ACTIVE


@dataclass(frozen=True, slots=True)
class NewExecution:
    execution_id: uuid.UUID
    job_id: str
    tenant_id: str
    fire_at_ms: int


def load_jobs(job_ids: Iterable[str]) -> dict[str, DueJob]:
    """The jobs with these ids, keyed by id (missing ids were deleted)."""
    ids = [uuid.UUID(job_id) for job_id in job_ids]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, tenant_id, job_type, args, kwargs, queue, cron_expression, "
            "timezone, status, next_run_at FROM chrono_job WHERE job_id = ANY(%s)",
            [ids],
        )
        rows = cursor.fetchall()
    jobs = {}
    for job_id, tenant_id, job_type, args, kwargs, queue, cron, tz, status, next_run in rows:
        jobs[str(job_id)] = DueJob(
            job_id=str(job_id),
            tenant_id=str(tenant_id),
            job_type=job_type,
            args=_json(args),
            kwargs=_json(kwargs),
            queue=queue,
            cron_expression=cron,
            timezone=tz,
            status=status,
            next_run_ms=None if next_run is None else datetime_to_ms(next_run),
        )
    return jobs


def _json(value: object) -> object:
    # psycopg returns jsonb already decoded; a text column would need json.loads.
    if isinstance(value, str):
        return json.loads(value)
    return value


def insert_scheduled(executions: Sequence[NewExecution]) -> None:
    """Insert executions as ``SCHEDULED``; an id that exists (a re-publish) is left as it is."""
    if not executions:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
            "scheduled_for, status, error, logs_url, fencing_token) "
            "SELECT e, j, t, 1, s, 'SCHEDULED', '', '', 0 "
            "FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::timestamptz[]) AS x(e, j, t, s) "
            "ON CONFLICT (execution_id) DO NOTHING",
            [
                [e.execution_id for e in executions],
                [uuid.UUID(e.job_id) for e in executions],
                [uuid.UUID(e.tenant_id) for e in executions],
                [ms_to_datetime(e.fire_at_ms) for e in executions],
            ],
        )


def record_dispatched(
    execution_ids: Sequence[uuid.UUID],
    *,
    confirmed_at_ms: int,
    advances: Sequence[tuple[str, int, int | None]],
) -> set[str]:
    """After RabbitMQ confirmed a batch: mark its executions ``DISPATCHED`` (unless a worker
    already started them) and advance each job ``(job id, fired ms, next ms or None)`` whose
    ``next_run_at`` still equals the fired occurrence. Returns the ids of the jobs advanced."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE chrono_execution SET dispatched_at = %s, status = CASE "
            "WHEN status = 'SCHEDULED' THEN 'DISPATCHED' ELSE status END "
            "WHERE execution_id = ANY(%s) AND dispatched_at IS NULL",
            [ms_to_datetime(confirmed_at_ms), list(execution_ids)],
        )
        if not advances:
            return set()
        cursor.execute(
            "UPDATE chrono_job AS j SET next_run_at = x.next_run_at, updated_at = now(), "
            "status = CASE WHEN x.next_run_at IS NULL THEN 'COMPLETED' ELSE j.status END "
            "FROM unnest(%s::uuid[], %s::timestamptz[], %s::timestamptz[]) "
            "AS x(job_id, fired_at, next_run_at) "
            "WHERE j.job_id = x.job_id AND j.status = 'ACTIVE' AND j.next_run_at = x.fired_at "
            "RETURNING j.job_id",
            [
                [uuid.UUID(job_id) for job_id, _, _ in advances],
                [ms_to_datetime(fired) for _, fired, _ in advances],
                [None if nxt is None else ms_to_datetime(nxt) for _, _, nxt in advances],
            ],
        )
        return {str(row[0]) for row in cursor.fetchall()}
