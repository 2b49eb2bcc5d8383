"""Execution state transitions made by workers: conditional updates with a fencing token.

A worker may start an execution only while it has not started (``SCHEDULED``, ``DISPATCHED`` or
``RETRY_WAIT``, :data:`scheduler.lifecycle.NOT_STARTED`; one statement, so two deliveries of the
same message cannot both start it); the start bumps the fencing token and hands it
to the worker; a result is written only with the token that started the run, so a worker that lost
its lease cannot overwrite what a newer attempt recorded. Each transition writes its audit row
(:mod:`search.audit`) in the same statement, a data-modifying CTE over the updated row.

Every statement names the execution by its partition key too (``scheduled_for``; see
:mod:`scheduler.lifecycle`, "Partition key"): a start by its message's fire time, a finish by
the ``scheduled_for`` its start returned, so PostgreSQL touches one day's partition, not every
day's. A start whose message carries no fire time names the id alone; so does, once more, a
start by key that matched nothing, so that a message whose fire time is not its row's (one
published by hand) still runs.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from django.db import DatabaseError, connection
from django.utils import timezone

from scheduler import prepared
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.lifecycle import (
    LOCK_EXECUTIONS_IN_ORDER,
    LOCK_KEYED_EXECUTIONS_IN_ORDER,
    NOT_STARTED,
    StartedExecution,
    key_range,
    sql_statuses,
    unflagged_reason_sql,
)
from scheduler.models import Execution, ExecutionStatus
from search import audit

log = logging.getLogger("chrono.worker")
RESULT_REPR_LIMIT = 4_096
_NOT_STARTED = sql_statuses(NOT_STARTED)


@dataclass(frozen=True, slots=True)
class StartRequest:
    execution_id: str
    attempt: int
    worker_id: str
    lease_ttl_ms: int
    at_ms: int
    # The execution's partition key: its message's chrono_fire_ms (None: the message carries
    # none, and the start names the id alone).
    scheduled_for: datetime | None = None


def start_execution(
    execution_id: str, *, attempt: int, worker_id: str, lease_ttl_ms: int,
    at_ms: int | None = None, scheduled_for: datetime | None = None,
) -> StartedExecution | None:
    """Move an execution to ``RUNNING`` for ``worker_id``; None when it is not startable
    (already running, finished, cancelled, or a stale attempt): the delivery must not run.
    ``scheduled_for`` is its partition key (the fire time of its message)."""
    request = StartRequest(execution_id, attempt, worker_id, lease_ttl_ms,
                           now_ms() if at_ms is None else at_ms, scheduled_for)
    return start_executions([request])[0]


def start_executions(
    requests: Sequence[StartRequest], *, on: prepared.OwnConnection | None = None
) -> list[StartedExecution | None]:
    """:func:`start_execution` for many deliveries with one statement (a worker's threads
    starting together), on this thread's connection or ``on`` one of its own; the result at
    each request's index. When one execution is asked for twice, only the first request can
    start it."""
    if not requests:
        return []
    first: dict[tuple[str, int], int] = {}
    for index, request in enumerate(requests):
        first.setdefault((request.execution_id, request.attempt), index)
    unique = [requests[index] for index in first.values()]
    keyed = [r for r in unique if r.scheduled_for is not None]
    with prepared.cursor(on) as cursor:
        started = _start(cursor, keyed, keyed=True) if keyed else {}
        # By id alone: the requests without a key, and those whose key matched nothing (not
        # startable, which costs this second look only then, or a key that is not the row's).
        again = [r for r in unique if r.execution_id not in started]
        if again:
            found = _start(cursor, again, keyed=False)
            for request in again:
                if request.scheduled_for is not None and request.execution_id in found:
                    log.warning("execution %s started by its id alone: its message's fire time "
                                "%s is not its scheduled_for %s", request.execution_id,
                                request.scheduled_for, found[request.execution_id][1])
            started.update(found)
    results: list[StartedExecution | None] = [None] * len(requests)
    for (execution_id, attempt), index in first.items():
        if execution_id in started:
            token, scheduled_for = started[execution_id]
            results[index] = StartedExecution(execution_id, token, attempt, scheduled_for)
    return results


def started_by(request: StartRequest) -> StartedExecution | None:
    """The run ``request`` itself started, when a start of it was committed but its answer
    lost with the connection (PostgreSQL failed over between the commit and the reply), so
    that trying the request again found the execution already running; None when another
    delivery (another worker, attempt or start time) holds it, or nothing does.

    A start writes the request's worker, attempt and start time (to the millisecond): a row
    still holding all three is this request's."""
    row = (Execution.objects.filter(
        execution_id=request.execution_id, attempt=request.attempt, worker_id=request.worker_id,
        started_at=ms_to_datetime(request.at_ms), status=ExecutionStatus.RUNNING)
        .values_list("fencing_token", "scheduled_for").first())
    return None if row is None else StartedExecution(request.execution_id, row[0],
                                                     request.attempt, row[1])


def _start(cursor: prepared.PreparedCursor, requests: Sequence[StartRequest], *, keyed: bool
           ) -> dict[str, tuple[int, datetime]]:
    """Start ``requests`` (one statement): ``{execution id: (fencing token, scheduled_for)}``
    of those started. ``keyed``: every request has its ``scheduled_for``."""
    columns: dict[str, list[object]] = {
        "execution_id": [uuid.UUID(r.execution_id) for r in requests],
        "attempt": [r.attempt for r in requests],
        "worker_id": [r.worker_id for r in requests],
        "started_at": [ms_to_datetime(r.at_ms) for r in requests],
        "lease_expires_at": [ms_to_datetime(r.at_ms + r.lease_ttl_ms) for r in requests],
    }
    if keyed:
        columns["scheduled_for"] = [r.scheduled_for for r in requests]
    if len(requests) == 1:
        cursor.execute(_START_ONE_SQL[keyed], _one_row(columns), rows=1)
    else:
        cursor.execute(_START_SQL[keyed], _parameters(columns, keyed=keyed), rows=len(requests))
    return {str(execution_id): (token, scheduled_for)
            for execution_id, token, scheduled_for in cursor.fetchall()}


@dataclass(frozen=True, slots=True)
class FinishRequest:
    started: StartedExecution
    status: str
    result: object = None
    error: str = ""
    exit_code: int | None = None
    at_ms: int = 0


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
    request = FinishRequest(started, status, result, error, exit_code,
                            now_ms() if at_ms is None else at_ms)
    return finish_executions([request])[0]


def finish_executions(
    requests: Sequence[FinishRequest], *, on: prepared.OwnConnection | None = None
) -> list[bool]:
    """:func:`finish_execution` for many runs with one statement (on this thread's connection
    or ``on`` one of its own; a statement more for runs started without their key); whether
    each was recorded."""
    if not requests:
        return []
    recorded: set[str] = set()
    with prepared.cursor(on) as cursor:
        for keyed in (True, False):
            group = [r for r in requests if (r.started.scheduled_for is not None) is keyed]
            if group:
                recorded |= _finish(cursor, group, keyed=keyed)
    return [r.started.execution_id in recorded for r in requests]


def _finish(cursor: prepared.PreparedCursor, requests: Sequence[FinishRequest], *, keyed: bool
            ) -> set[str]:
    """Record ``requests`` (one statement); the ids of those recorded."""
    columns: dict[str, list[object]] = {
        "execution_id": [uuid.UUID(r.started.execution_id) for r in requests],
        "fencing_token": [r.started.fencing_token for r in requests],
        "status": [str(r.status) for r in requests],
        "finished_at": [ms_to_datetime(r.at_ms) for r in requests],
        "result": [_result_json(r.result) for r in requests],
        "error": [r.error for r in requests],
        "exit_code": [r.exit_code for r in requests],
    }
    if keyed:
        columns["scheduled_for"] = [r.started.scheduled_for for r in requests]
    if len(requests) == 1:
        cursor.execute(_finish_one_sql(columns["status"][0], keyed), _one_row(columns), rows=1)
        return {requests[0].started.execution_id} if cursor.rowcount == 1 else set()
    cursor.execute(_FINISH_SQL[keyed], _parameters(columns, keyed=keyed), rows=len(requests))
    return {str(row[0]) for row in cursor.fetchall()}


def refusal_reason(started: StartedExecution) -> str:
    """Why a write of ``started`` was refused, read again for the log (off the hot path: only
    after a refusal). A lease lost to another attempt is not a row gone, as after a database
    failover that lost the latest commits, and the operator is told which."""
    rows = Execution.objects.filter(execution_id=started.execution_id)
    if started.scheduled_for is not None:
        rows = rows.filter(scheduled_for=started.scheduled_for)
    try:
        row = rows.values_list("status", "fencing_token", "attempt", "worker_id").first()
    except DatabaseError as exc:  # a log line must not fail the task it explains
        return f"its execution could not be read again: {exc!r}"
    if row is None:
        return ("its execution row is gone (a database failover that lost its latest commits, "
                "or a retention job that dropped its day)")
    status, token, attempt, worker = row
    if token != started.fencing_token:
        return (f"fencing token {started.fencing_token} is stale: the execution is {status}, "
                f"attempt {attempt}, token {token}, on {worker or 'no worker'} "
                "(its lease expired and the reaper handed it on)")
    return f"the execution is already {status} (attempt {attempt}, token {token})"


def cancel_pending_executions(job_ids: Sequence[uuid.UUID | str], *, by: str) -> int:
    """Cancel the executions of jobs that have not started (``SCHEDULED``, ``DISPATCHED``,
    ``RETRY_WAIT``), in the caller's transaction; how many. One statement with their audit rows,
    however many jobs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE chrono_execution SET status = 'CANCELLED', finished_at = %s "
            # nosec B608 # the audit SQL is built from module constants; every value is a parameter
            f"WHERE job_id = ANY(%s::uuid[]) AND status IN ({_NOT_STARTED}) "
            "RETURNING execution_id, job_id, tenant_id, attempt, scheduled_for, finished_at) "
            + audit.insert_select(
                "u",
                action_name=audit.EXECUTION_CANCELLED,
                actor="%s",
                occurred_at="u.finished_at",
                execution_id="u.execution_id",
                data="jsonb_build_object('attempt', u.attempt, 'scheduled_for', u.scheduled_for)",
            ),
            [timezone.now(), prepared.array(job_ids), audit.current_actor(by)],
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


_FINISHED_DATA = (
    "jsonb_strip_nulls(jsonb_build_object('attempt', u.attempt, 'worker_id', "
    "u.worker_id, 'exit_code', u.exit_code, 'error', NULLIF(u.error, ''), 'duration_us', "
    "(extract(epoch FROM u.finished_at - u.started_at) * 1000000)::bigint))"
)


def _finished_audit(status: str) -> str:
    return audit.insert_select(
        "u",
        action_name=audit.FINISH_ACTIONS[status],
        actor="'worker:' || u.worker_id",
        occurred_at="u.finished_at",
        execution_id="u.execution_id",
        data=_FINISHED_DATA,
    )


_FINISHED_AUDIT = audit.insert_select(
    "u",
    action_sql="(CASE u.status " + " ".join(
        f"WHEN '{status}' THEN '{name}'" for status, name in audit.FINISH_ACTIONS.items()
    ) + " END)",
    actor="'worker:' || u.worker_id",
    occurred_at="u.finished_at",
    execution_id="u.execution_id",
    data=_FINISHED_DATA,
)


# The partition key of a single-row statement, and of a batched one's rows ``x`` (the first and
# last of their ``scheduled_for`` bound the days planned; :mod:`scheduler.lifecycle`).
_ONE_KEY = " AND scheduled_for = %(scheduled_for)s"
_BATCH_KEY = (" AND e.scheduled_for = x.scheduled_for "
              "AND e.scheduled_for BETWEEN %s::timestamptz AND %s::timestamptz")


def _batched(columns: str, update: str, tail: str, *, keyed: bool) -> str:
    """An update of the executions in rows ``x`` (one array per column, unnested; ``{rows}``
    marks where the update's FROM goes, ``{key}`` where its partition key condition goes),
    followed by ``tail``. The rows are locked in id order first (``l``) so that concurrent
    batches never deadlock. ``keyed``: the rows carry ``scheduled_for`` too (the last column).
    A batch of one (every statement of a prefork child) uses a plain single-row update
    instead: a quarter cheaper."""
    if keyed:
        columns += ", scheduled_for::timestamptz"
    names = [c.split("::")[0] for c in columns.split(", ")]
    arrays = ", ".join(f"%s::{c.split('::')[1]}[]" for c in columns.split(", "))
    lock = (LOCK_KEYED_EXECUTIONS_IN_ORDER.format(keys="x", first="%s", last="%s") if keyed
            else LOCK_EXECUTIONS_IN_ORDER.format(ids="%s"))
    rows = f"FROM x JOIN l USING ({'execution_id, scheduled_for' if keyed else 'execution_id'})"
    return (f"WITH x AS (SELECT * FROM unnest({arrays}) AS x({', '.join(names)})), "
            # nosec B608 # built at import from this module's constant SQL
            f"l AS ({lock}), "
            f"u AS ({update.replace('{rows}', rows).replace('{key}', _BATCH_KEY if keyed else '')})"
            f"{tail}")


def _parameters(columns: dict[str, list[object]], *, keyed: bool) -> list[object]:
    """Parameters of a statement built by :func:`_batched`: the arrays (in the order of its
    ``columns``), then the ids to lock or, ``keyed``, the bounds of ``scheduled_for`` for the
    lock and for the update."""
    arrays = {name: prepared.array(values) for name, values in columns.items()}
    if not keyed:
        return [*arrays.values(), arrays["execution_id"]]
    first, last = key_range(columns["scheduled_for"])  # type: ignore[arg-type]
    return [*arrays.values(), first, last, first, last]


def _one_row(columns: dict[str, list[object]]) -> dict[str, object]:
    """Parameters of a single-row statement: each column's one value, by name."""
    return {name: values[0] for name, values in columns.items()}


@cache
def _finish_one_sql(status: str, keyed: bool) -> str:
    return (
        "WITH u AS (UPDATE chrono_execution SET status = %(status)s, "
        # nosec B608 # the audit SQL of a constant status; values are parameters
        "finished_at = %(finished_at)s, result = %(result)s::jsonb, error = %(error)s, "
        "exit_code = %(exit_code)s, lease_expires_at = NULL "
        f"WHERE execution_id = %(execution_id)s{_ONE_KEY if keyed else ''} "
        "AND fencing_token = %(fencing_token)s AND status = 'RUNNING' "
        "RETURNING execution_id, job_id, tenant_id, attempt, worker_id, exit_code, error, "
        f"started_at, finished_at) {_finished_audit(status)}"
    )


def _result_json(result: object) -> str | None:
    if result is None:
        return None
    try:
        return json.dumps(result)
    except (TypeError, ValueError):
        return json.dumps({"repr": repr(result)[:RESULT_REPR_LIMIT]})


def _start_one_sql(keyed: bool) -> str:
    return (
        "WITH u AS (UPDATE chrono_execution SET status = 'RUNNING', worker_id = %(worker_id)s, "
        # nosec B608 # module constants only; values are parameters
        "started_at = %(started_at)s, lease_expires_at = %(lease_expires_at)s, "
        "fencing_token = fencing_token + 1, "
        f"reason = {unflagged_reason_sql('reason')} "
        f"WHERE execution_id = %(execution_id)s{_ONE_KEY if keyed else ''} "
        f"AND attempt = %(attempt)s AND status IN ({_NOT_STARTED}) "
        "RETURNING execution_id, job_id, tenant_id, attempt, worker_id, started_at, "
        f"scheduled_for, fencing_token), a AS ({_STARTED_AUDIT}) "
        "SELECT execution_id, fencing_token, scheduled_for FROM u"
    )


def _start_sql(keyed: bool) -> str:
    return _batched(
        "execution_id::uuid, attempt::int, worker_id::text, started_at::timestamptz, "
        "lease_expires_at::timestamptz",
        "UPDATE chrono_execution AS e SET status = 'RUNNING', worker_id = x.worker_id, "
        # nosec B608 # module constants only; values are parameters
        "started_at = x.started_at, lease_expires_at = x.lease_expires_at, "
        "fencing_token = e.fencing_token + 1, "
        f"reason = {unflagged_reason_sql('e.reason')} {{rows}} "
        "WHERE e.execution_id = x.execution_id{key} AND e.attempt = x.attempt "
        f"AND e.status IN ({_NOT_STARTED}) "
        "RETURNING e.execution_id, e.job_id, e.tenant_id, e.attempt, e.worker_id, "
        "e.started_at, e.scheduled_for, e.fencing_token",
        f", a AS ({_STARTED_AUDIT}) "  # nosec B608 # module constants only
        "SELECT execution_id, fencing_token, scheduled_for FROM u",
        keyed=keyed,
    )


def _finish_sql(keyed: bool) -> str:
    return _batched(
        "execution_id::uuid, fencing_token::bigint, status::text, finished_at::timestamptz, "
        "result::text, error::text, exit_code::int",
        "UPDATE chrono_execution AS e SET status = x.status, finished_at = x.finished_at, "
        "result = x.result::jsonb, error = x.error, exit_code = x.exit_code, "
        "lease_expires_at = NULL {rows} "
        "WHERE e.execution_id = x.execution_id{key} AND e.fencing_token = x.fencing_token "
        "AND e.status = 'RUNNING' "
        "RETURNING e.execution_id, e.job_id, e.tenant_id, e.attempt, e.worker_id, e.status, "
        "e.exit_code, e.error, e.started_at, e.finished_at",
        f" {_FINISHED_AUDIT} RETURNING execution_id",
        keyed=keyed,
    )


# Each statement by key (True) and by id alone (False), built once.
_START_ONE_SQL = {keyed: _start_one_sql(keyed) for keyed in (True, False)}
_START_SQL = {keyed: _start_sql(keyed) for keyed in (True, False)}
_FINISH_SQL = {keyed: _finish_sql(keyed) for keyed in (True, False)}
