"""Cancelling executions: persisted first, checked at start, delivered to running ones.

An execution that has not started (``SCHEDULED``, ``DISPATCHED``, ``RETRY_WAIT``) is cancelled
by a conditional update, and the worker-side start refuses it. A running one gets
``cancel_requested_at``; the request is announced on ``chrono:cancel`` (pub/sub,
:func:`scheduler.lifecycle.announce_cancel`) to the worker
process running it, whose lease keeper raises ``SoftTimeLimitExceeded`` in the task (SIGUSR1,
Celery's own soft-timeout signal) so it can clean up, and kills the process after
``cancel_grace_ms`` if the task is still running. A worker that missed the announcement sees the
request at its next lease renewal; one that died is settled by the reaper. Either way the
execution ends ``CANCELLED`` and is not retried.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction

from scheduler.clock import ms_to_datetime, now_ms
from scheduler.lifecycle import CANCELLED_AUDIT, StartedExecution, announce_cancel, key_range
from scheduler.prepared import array

_RETURNING = "execution_id, job_id, tenant_id, attempt, reason, finished_at"


def request_cancel_running(
    *, by: str, job_ids: Sequence[uuid.UUID | str] = (), execution_id: str | None = None,
    scheduled_for: datetime | None = None,
) -> list[str]:
    """Ask running executions (of the jobs ``job_ids``, or one) to stop; returns their ids.
    Announced to their workers when the caller's transaction commits. ``scheduled_for`` (with
    ``execution_id``) is the execution's partition key."""
    if execution_id is not None:
        target, value = "execution_id = %s", [uuid.UUID(str(execution_id))]
    else:
        target, value = "job_id = ANY(%s::uuid[])", [array(job_ids)]
    key = "" if scheduled_for is None else "AND scheduled_for = %s "
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE chrono_execution SET cancel_requested_at = %s, reason = %s "
            # nosec B608 # target is one of two literal conditions; values are parameters
            f"WHERE {target} {key}AND status = 'RUNNING' AND cancel_requested_at IS NULL "
            "RETURNING execution_id",
            [ms_to_datetime(now_ms()), f"cancel requested by {by or 'unknown'}"[:300],
             *value, *([] if scheduled_for is None else [scheduled_for])],
        )
        ids = [str(row[0]) for row in cursor.fetchall()]
    if ids:
        transaction.on_commit(lambda: announce_cancel(ids))
    return ids


def finish_cancelled(started: StartedExecution) -> bool:
    """End a run that stopped because it was asked to: ``CANCELLED``, never retried. False
    when no cancellation was requested (or the fencing check refused it)."""
    key = "" if started.scheduled_for is None else "AND scheduled_for = %s "
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE chrono_execution SET status = 'CANCELLED', finished_at = %s, "
            # nosec B608 # _RETURNING and CANCELLED_AUDIT are module constants
            "lease_expires_at = NULL, exit_code = 1 "
            f"WHERE execution_id = %s {key}AND fencing_token = %s AND status = 'RUNNING' "
            f"AND cancel_requested_at IS NOT NULL RETURNING {_RETURNING}) "
            f"{CANCELLED_AUDIT} RETURNING 1",
            [ms_to_datetime(now_ms()), uuid.UUID(started.execution_id),
             *([] if started.scheduled_for is None else [started.scheduled_for]),
             started.fencing_token, "worker"],
        )
        return cursor.rowcount == 1


def settle_cancelled_lost(executions: Sequence[tuple[str, datetime]]) -> int:
    """Executions ``(id, scheduled_for)`` asked to stop whose worker died (or was killed after
    the grace): CANCELLED. The reaper read them from the table, so it has their partition key:
    the statement touches their days alone."""
    if not executions:
        return 0
    times = [scheduled_for for _, scheduled_for in executions]
    first, last = key_range(times)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE chrono_execution AS e SET status = 'CANCELLED', finished_at = %s, "
            # nosec B608 # _RETURNING and CANCELLED_AUDIT are module constants
            "lease_expires_at = NULL, fencing_token = e.fencing_token + 1 "
            "FROM unnest(%s::uuid[], %s::timestamptz[]) AS k(execution_id, scheduled_for) "
            "WHERE e.execution_id = k.execution_id AND e.scheduled_for = k.scheduled_for "
            "AND e.scheduled_for BETWEEN %s::timestamptz AND %s::timestamptz "
            "AND e.status = 'RUNNING' AND e.cancel_requested_at IS NOT NULL "
            f"RETURNING {', '.join('e.' + c for c in _RETURNING.split(', '))}) "
            f"{CANCELLED_AUDIT} RETURNING 1",
            [ms_to_datetime(now_ms()), [uuid.UUID(i) for i, _ in executions], times, first, last,
             "reaper"],
        )
        return cursor.rowcount
