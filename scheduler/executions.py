"""Execution state transitions made by workers: conditional updates with a fencing token.

A worker may start an execution only from ``SCHEDULED`` or ``DISPATCHED`` (one statement, so two
deliveries of the same message cannot both start it); the start bumps the fencing token and hands it
to the worker; a result is written only with the token that started the run, so a worker that lost
its lease cannot overwrite what a newer attempt recorded. Each transition writes its audit row
(:mod:`search.audit`) in the same statement, a data-modifying CTE over the updated row.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from scheduler.clock import ms_to_datetime, now_ms
from scheduler.models import ExecutionStatus
from search import audit

RESULT_REPR_LIMIT = 4_096


@dataclass(frozen=True, slots=True)
class StartedExecution:
    execution_id: str
    fencing_token: int
    attempt: int


def start_execution(
    execution_id: str, *, attempt: int, worker_id: str, lease_ttl_ms: int, at_ms: int | None = None
) -> StartedExecution | None:
    """Move an execution to ``RUNNING`` for ``worker_id``; None when it is not startable
    (already running, finished, cancelled, or a stale attempt): the delivery must not run."""
    at_ms = now_ms() if at_ms is None else at_ms
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE chrono_execution SET status = 'RUNNING', worker_id = %s, "
            "started_at = %s, lease_expires_at = %s, fencing_token = fencing_token + 1 "
            "WHERE execution_id = %s AND attempt = %s "
            "AND status IN ('SCHEDULED', 'DISPATCHED', 'RETRY_WAIT') "
            "RETURNING execution_id, job_id, tenant_id, attempt, worker_id, started_at, "
            "scheduled_for, fencing_token), "
            f"a AS ({_STARTED_AUDIT}) "
            "SELECT fencing_token FROM u",
            [
                worker_id,
                ms_to_datetime(at_ms),
                ms_to_datetime(at_ms + lease_ttl_ms),
                uuid.UUID(execution_id),
                attempt,
            ],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return StartedExecution(execution_id=execution_id, fencing_token=row[0], attempt=attempt)


def finish_execution(
    started: StartedExecution,
    *,
    status: ExecutionStatus,
    result: object = None,
    error: str = "",
    exit_code: int | None = None,
    at_ms: int | None = None,
) -> bool:
    """Record the outcome of a run; False when the fencing check refused it (the lease was
    lost and another attempt owns the execution now)."""
    at_ms = now_ms() if at_ms is None else at_ms
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE chrono_execution SET status = %s, finished_at = %s, "
            "result = %s::jsonb, error = %s, exit_code = %s, lease_expires_at = NULL "
            "WHERE execution_id = %s AND fencing_token = %s AND status = 'RUNNING' "
            "RETURNING execution_id, job_id, tenant_id, attempt, worker_id, exit_code, error, "
            f"started_at, finished_at) {_finished_audit(status)}",
            [
                status,
                ms_to_datetime(at_ms),
                _result_json(result),
                error,
                exit_code,
                uuid.UUID(started.execution_id),
                started.fencing_token,
            ],
        )
        return cursor.rowcount == 1


def cancel_pending_executions(job_id: uuid.UUID | str, *, by: str) -> int:
    """Cancel the executions of a job that have not started (``SCHEDULED``/``DISPATCHED``), in
    the caller's transaction; how many. One statement with their audit rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE chrono_execution SET status = 'CANCELLED', finished_at = %s "
            "WHERE job_id = %s AND status IN ('SCHEDULED', 'DISPATCHED', 'RETRY_WAIT') "
            "RETURNING execution_id, job_id, tenant_id, attempt, scheduled_for, finished_at) "
            + audit.insert_select(
                "u",
                action_name=audit.EXECUTION_CANCELLED,
                actor="%s",
                occurred_at="u.finished_at",
                execution_id="u.execution_id",
                data="jsonb_build_object('attempt', u.attempt, 'scheduled_for', u.scheduled_for)",
            ),
            [timezone.now(), uuid.UUID(str(job_id)), audit.current_actor(by)],
        )
        return cursor.rowcount


# The audit rows of a start and of a finish, written by the statement that makes the change.
_STARTED_AUDIT = audit.insert_select(
    "u",
    action_name=audit.EXECUTION_STARTED,
    actor="'worker:' || u.worker_id",
    occurred_at="u.started_at",
    execution_id="u.execution_id",
    data="jsonb_build_object('attempt', u.attempt, 'worker_id', u.worker_id, "
    "'fencing_token', u.fencing_token, 'scheduled_for', u.scheduled_for)",
)


def _finished_audit(status: str) -> str:
    return audit.insert_select(
        "u",
        action_name=audit.FINISH_ACTIONS[status],
        actor="'worker:' || u.worker_id",
        occurred_at="u.finished_at",
        execution_id="u.execution_id",
        data="jsonb_strip_nulls(jsonb_build_object('attempt', u.attempt, 'worker_id', "
        "u.worker_id, 'exit_code', u.exit_code, 'error', NULLIF(u.error, ''), 'duration_us', "
        "(extract(epoch FROM u.finished_at - u.started_at) * 1000000)::bigint))",
    )


def _result_json(result: object) -> str | None:
    if result is None:
        return None
    try:
        return json.dumps(result)
    except (TypeError, ValueError):
        return json.dumps({"repr": repr(result)[:RESULT_REPR_LIMIT]})
