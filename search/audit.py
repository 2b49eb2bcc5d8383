"""Audit events: the vocabulary of actions, and the two ways a state change writes its outbox row.

Every state change writes one :class:`~search.models.AuditEvent` in the transaction (or the very
statement) that makes the change, so the change and its audit row commit together or not at all
(DESIGN.md decision 11). There are two ways to write one:

* :func:`record` (and :func:`record_jobs` for many jobs at once, with COPY) for ORM call sites:
  an INSERT on the caller's connection, inside its transaction;
* :func:`insert_select` (or :func:`insert_rows` of several :func:`select_rows`) for the batch
  statements of the hot paths (beat, workers): the SQL of an ``INSERT INTO search_auditevent …
  SELECT … FROM <rows>`` to put in a data-modifying CTE over the rows the statement just changed
  (``UPDATE … RETURNING``), so the audit rows cost no extra round trip and exist exactly for the
  rows whose conditional update took effect. Repeating a transition that changes nothing writes
  nothing.

The actor is who asked for the change: ``user:<name>``, ``api-key:<prefix>``, ``beat``,
``worker:<id>``, ``reaper`` or ``system``. Call sites pass it as ``by``/``actor``; when they pass
nothing during a web request, :func:`current_actor` takes it from the request's authentication
(see :mod:`search.middleware`).
"""

from __future__ import annotations

import contextvars
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from chronocore.pgcopy import NULL, copy_rows, escape

AUDIT_TABLE = "search_auditevent"
SYSTEM_ACTOR = "system"
BEAT_ACTOR = "beat"
REAPER_ACTOR = "reaper"

SUCCESS, FAILURE, UNKNOWN = "success", "failure", "unknown"


@dataclass(frozen=True)
class Action:
    """One kind of state change and how its documents read: ``outcome`` is ECS
    ``event.outcome``, ``level`` is ``log.level``, ``category``/``kind_of_change`` are ECS
    ``event.category``/``event.type``, and ``summary`` is the message template (fields:
    ``job``, ``execution``, ``actor``, ``worker``, ``reason``, ``error``, ``attempt``,
    ``scheduled_for``)."""

    name: str
    outcome: str
    level: str
    category: str
    kind_of_change: str
    summary: str


JOB_CREATED = "job.created"
JOB_EDITED = "job.edited"
JOB_PAUSED = "job.paused"
JOB_RESUMED = "job.resumed"
JOB_TRIGGERED = "job.triggered"
JOB_CANCELLED = "job.cancelled"
JOB_COMPLETED = "job.completed"
JOB_DELETED = "job.deleted"
EXECUTION_DISPATCHED = "execution.dispatched"
EXECUTION_STARTED = "execution.started"
EXECUTION_SUCCEEDED = "execution.succeeded"
EXECUTION_FAILED = "execution.failed"
EXECUTION_RETRIED = "execution.retried"
EXECUTION_LOST = "execution.lost"
EXECUTION_DEAD_LETTERED = "execution.dead_lettered"
EXECUTION_CANCELLED = "execution.cancelled"
EXECUTION_SKIPPED = "execution.skipped"
EXECUTION_MISSED = "execution.missed"
WORKER_UP = "worker.up"
WORKER_DOWN = "worker.down"
WORKFLOW_DEFINED = "workflow.defined"
CALENDAR_CREATED = "calendar.created"
CALENDAR_CHANGED = "calendar.changed"
CALENDAR_DELETED = "calendar.deleted"
WORKFLOW_RUN_STARTED = "workflow.run_started"
WORKFLOW_RUN_ENDED = "workflow.run_ended"
WORKFLOW_RUN_CANCEL_REQUESTED = "workflow.run_cancel_requested"
WORKFLOW_RUN_RETRIED = "workflow.run_retried"
WORKFLOW_STEP_CHANGED = "workflow.step_changed"

_JOB, _EXEC, _HOST = "configuration", "process", "host"
ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(JOB_CREATED, SUCCESS, "info", _JOB, "creation", "Job {job} created by {actor}"),
        Action(JOB_EDITED, SUCCESS, "info", _JOB, "change", "Job {job} rescheduled by {actor}"),
        Action(JOB_PAUSED, SUCCESS, "info", _JOB, "change", "Job {job} paused by {actor}"),
        Action(JOB_RESUMED, SUCCESS, "info", _JOB, "change", "Job {job} resumed by {actor}"),
        Action(JOB_TRIGGERED, SUCCESS, "info", _JOB, "change",
               "Job {job} triggered by {actor}"),
        Action(JOB_CANCELLED, SUCCESS, "info", _JOB, "change", "Job {job} cancelled by {actor}"),
        Action(JOB_COMPLETED, SUCCESS, "info", _JOB, "change",
               "Job {job} completed: its last occurrence was dispatched"),
        Action(JOB_DELETED, SUCCESS, "info", _JOB, "deletion", "Job {job} deleted by {actor}"),
        Action(EXECUTION_DISPATCHED, SUCCESS, "info", _EXEC, "info",
               "Execution {execution} of job {job} dispatched"),
        Action(EXECUTION_STARTED, SUCCESS, "info", _EXEC, "start",
               "Execution {execution} of job {job} started on {worker} (attempt {attempt})"),
        Action(EXECUTION_SUCCEEDED, SUCCESS, "info", _EXEC, "end",
               "Execution {execution} of job {job} succeeded"),
        Action(EXECUTION_FAILED, FAILURE, "error", _EXEC, "end",
               "Execution {execution} of job {job} failed: {error}"),
        Action(EXECUTION_RETRIED, UNKNOWN, "warning", _EXEC, "info",
               "Execution {execution} of job {job} will be retried (attempt {attempt})"),
        Action(EXECUTION_LOST, FAILURE, "warning", _EXEC, "end",
               "Execution {execution} of job {job} was lost: {reason}"),
        Action(EXECUTION_DEAD_LETTERED, FAILURE, "error", _EXEC, "end",
               "Execution {execution} of job {job} dead-lettered: {reason}"),
        Action(EXECUTION_CANCELLED, SUCCESS, "info", _EXEC, "end",
               "Execution {execution} of job {job} cancelled by {actor}"),
        Action(EXECUTION_SKIPPED, UNKNOWN, "warning", _EXEC, "info",
               "Occurrence {scheduled_for} of job {job} skipped: {reason}"),
        Action(EXECUTION_MISSED, FAILURE, "warning", _EXEC, "info",
               "Occurrence {scheduled_for} of job {job} missed: {reason}"),
        Action(WORKER_UP, SUCCESS, "info", _HOST, "start", "Worker {worker} is up"),
        Action(WORKER_DOWN, SUCCESS, "info", _HOST, "end", "Worker {worker} is down"),
        # Workflows: the run id, step and statuses are in the row's data (chrono.details); the
        # message is written by the engine.
        Action(WORKFLOW_DEFINED, SUCCESS, "info", _JOB, "creation", "Workflow defined"),
        Action(WORKFLOW_RUN_STARTED, SUCCESS, "info", _EXEC, "start", "Workflow run started"),
        Action(WORKFLOW_RUN_ENDED, UNKNOWN, "info", _EXEC, "end", "Workflow run ended"),
        Action(WORKFLOW_RUN_CANCEL_REQUESTED, SUCCESS, "info", _EXEC, "change",
               "Workflow run cancelled by {actor}"),
        Action(WORKFLOW_RUN_RETRIED, SUCCESS, "info", _EXEC, "change",
               "Workflow run retried from failure by {actor}"),
        Action(WORKFLOW_STEP_CHANGED, UNKNOWN, "info", _EXEC, "change", "Workflow step changed"),
        # Exclusion calendars: the message (naming the calendar) is written by the caller, the
        # calendar's fields are in the row's data.
        Action(CALENDAR_CREATED, SUCCESS, "info", _JOB, "creation", "Calendar created"),
        Action(CALENDAR_CHANGED, SUCCESS, "info", _JOB, "change", "Calendar changed"),
        Action(CALENDAR_DELETED, SUCCESS, "info", _JOB, "deletion", "Calendar deleted"),
    )
}

# Execution statuses a worker or the reaper finishes with, and the action each one records.
FINISH_ACTIONS = {
    "SUCCEEDED": EXECUTION_SUCCEEDED,
    "FAILED": EXECUTION_FAILED,
    "LOST": EXECUTION_LOST,
    "DEAD_LETTERED": EXECUTION_DEAD_LETTERED,
    "CANCELLED": EXECUTION_CANCELLED,
    "RETRY_WAIT": EXECUTION_RETRIED,
}


def action(name: str) -> Action:
    """The :class:`Action` called ``name``; raises ValueError for a name not in the vocabulary."""
    try:
        return ACTIONS[name]
    except KeyError:
        raise ValueError(
            f"{name!r} is not an audit action; add it to search.audit.ACTIONS first"
        ) from None


def skip_action(reason: str) -> str:
    """The action for an occurrence turned SKIPPED with ``reason``: the misfire policy's
    reasons (:mod:`scheduler.misfire`) start with "missed" (nothing dispatched it in time);
    anything else (an overlap policy) is a deliberate skip."""
    return EXECUTION_MISSED if reason.startswith("missed") else EXECUTION_SKIPPED


# ---------------------------------------------------------------------------------- the actor

_current_request: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "chrono_audit_request", default=None
)


def actor_of_request(request: Any) -> str:
    """Who makes ``request``: ``api-key:<prefix>`` for a tenant API key (DRF copies its
    ``auth`` onto the Django request), ``user:<name>`` for a signed-in user, else ""."""
    prefix = getattr(getattr(request, "auth", None), "prefix", None)
    if prefix:
        return f"api-key:{prefix}"
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "is_authenticated", False):
        get_username = getattr(user, "get_username", None)
        if get_username is not None:
            return f"user:{get_username()}"
    return ""


@contextmanager
def serving(request: Any) -> Iterator[None]:
    """Make ``request`` the one :func:`current_actor` reads while the block runs."""
    token = _current_request.set(request)
    try:
        yield
    finally:
        _current_request.reset(token)


def current_actor(by: str = "") -> str:
    """``by`` when given; else whoever makes the web request being served; else "system"."""
    if by:
        return by
    request = _current_request.get()
    return (actor_of_request(request) if request is not None else "") or SYSTEM_ACTOR


# --------------------------------------------------------------------------------- ORM call sites


def record(
    action_name: str,
    *,
    tenant_id: uuid.UUID | str | None,
    job_id: uuid.UUID | str | None = None,
    execution_id: uuid.UUID | str | None = None,
    actor: str = "",
    message: str = "",
    data: Mapping[str, Any] | None = None,
    occurred_at: datetime | None = None,
) -> None:
    """Write one audit row in the caller's transaction (one INSERT)."""
    from search.models import AuditEvent

    spec = action(action_name)
    AuditEvent.objects.create(
        tenant_id=tenant_id,
        occurred_at=occurred_at or timezone.now(),
        action=spec.name,
        outcome=spec.outcome,
        job_id=job_id,
        execution_id=execution_id,
        actor=current_actor(actor),
        message=message,
        data=dict(data or {}),
    )


def record_jobs(
    action_name: str,
    *,
    tenant_id: uuid.UUID | str,
    job_ids: Sequence[uuid.UUID | str],
    actor: str = "",
    data: Mapping[str, Any] | None = None,
) -> None:
    """Write one audit row per job of ``job_ids`` (the same action and data for all) with one
    COPY in the caller's transaction: for bulk creation (``schedule_once_many``, the REST API's
    COPY ingest).

    The rows are COPY text made here, ids passed as text: an ``INSERT … SELECT FROM unnest(
    uuid[])`` costs PostgreSQL as much, but its per-id ``uuid.UUID`` and array adaptation cost
    Python ten times the text (15 ms for 5,000 jobs, a sixth of a bulk request's Python time)."""
    if not job_ids:
        return
    spec = action(action_name)
    occurred_at = timezone.now().isoformat()
    head = f"{escape(str(tenant_id))}\t{occurred_at}\t{spec.name}\t{spec.outcome}\t"
    tail = f"\t{NULL}\t{escape(current_actor(actor))}\t\t{escape(_json(data))}\n"
    rows = "".join([f"{head}{escape(str(job_id))}{tail}" for job_id in job_ids])
    copy_rows(_COPY_JOBS_SQL, [rows])


_COPY_JOBS_SQL = (
    f"COPY {AUDIT_TABLE} (tenant_id, occurred_at, action, outcome, job_id, execution_id, actor, "
    "message, data) FROM STDIN"
)


def job_data(job: Any) -> dict[str, Any]:
    """What an audit row of a job's creation or edit keeps about it: its schedule and how its
    occurrences run (empty fields and unset options left out; the schedule-only options of a
    cron job only for one)."""
    interval_ms = getattr(job, "interval_ms", None)
    cron = bool(job.cron_expression) or bool(interval_ms)  # recurring: cron or interval
    fields = {
        "job_type": job.job_type,
        "name": job.name,
        "queue": job.queue,
        "cron_expression": job.cron_expression,
        "interval_ms": interval_ms,
        "interval_anchor": getattr(job, "interval_anchor", None),
        "timezone": job.timezone if cron else None,
        "next_run_at": job.next_run_at,
        "max_retries": job.max_retries or None,
        "retry_policy": job.retry_policy or None,
        "soft_timeout_ms": job.soft_timeout_ms,
        "hard_timeout_ms": job.hard_timeout_ms,
        "overlap_policy": job.overlap_policy if cron else None,
        "misfire_policy": job.misfire_policy if cron else None,
        "misfire_fire_all_limit": job.misfire_fire_all_limit if cron else None,
        "jitter_ms": (job.jitter_ms or None) if cron else None,
        "calendars": list(getattr(job, "calendars", None) or []) or None,
    }
    return {key: value for key, value in fields.items() if value not in (None, "")}


def _json(data: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(data or {}), cls=DjangoJSONEncoder)


# ------------------------------------------------------------------------ batch statements (SQL)


def insert_select(source: str, **select: str) -> str:
    """SQL of ``INSERT INTO search_auditevent (…) SELECT … FROM source [WHERE where]``: one
    :func:`select_rows` made an INSERT. Meant as the body of a data-modifying CTE next to the
    update it audits::

        WITH u AS (UPDATE chrono_execution SET … WHERE … RETURNING execution_id, job_id, …),
        a AS ({insert_select("u", action_name=EXECUTION_STARTED, actor="'beat'", …)})
        SELECT … FROM u
    """
    return insert_rows(select_rows(source, **select))


def insert_rows(*selects: str) -> str:
    """SQL inserting the rows of several :func:`select_rows` with one INSERT, ids in the order
    of ``selects`` (when two events of one statement share a timestamp, the id orders them)."""
    return (
        f"INSERT INTO {AUDIT_TABLE} (tenant_id, occurred_at, action, outcome, job_id, "
        "execution_id, actor, message, data) " + " UNION ALL ".join(f"({s})" for s in selects)
    )


def select_rows(
    source: str,
    *,
    action_name: str | None = None,
    action_sql: str | None = None,
    actor: str,
    occurred_at: str,
    tenant_id: str = "tenant_id",
    job_id: str = "job_id",
    execution_id: str = "NULL",
    data: str = "'{}'::jsonb",
    where: str = "",
) -> str:
    """SQL selecting one audit row per row of ``source`` (``[WHERE where]``), in the column order
    of :func:`insert_rows`.

    Every argument except the action is an SQL expression over the rows of ``source``; write
    constants as SQL literals (``actor="'beat'"``). The action is either one name of the
    vocabulary (``action_name``; its outcome goes with it) or, when it differs row by row, an
    expression giving an action name (``action_sql``; the outcome follows each row's action).
    """
    if (action_name is None) == (action_sql is None):
        raise ValueError("give exactly one of action_name= and action_sql=")
    if action_name is not None:
        spec = action(action_name)
        action_expr, outcome_expr = f"'{spec.name}'", f"'{spec.outcome}'"
    else:
        action_expr, outcome_expr = action_sql, outcome_case(action_sql)
    sql = (
        f"SELECT {tenant_id}, {occurred_at}, {action_expr}, {outcome_expr}, {job_id}, "
        # nosec B608 # the SQL expressions come from Chrono's modules, never from input
        f"{execution_id}, {actor}, '', {data} FROM {source}"
    )
    return f"{sql} WHERE {where}" if where else sql


def attempt_ended(
    source: str, *, failure_action: str, actor: str, occurred_at: str = "statement_timestamp()"
) -> str:
    """SQL auditing attempts that ended badly, for the retry path: per row of ``source``, the
    failure (``failure_action``: EXECUTION_FAILED from a worker, EXECUTION_LOST from the reaper)
    then what the retry policy made of it, by the row's new ``status``: EXECUTION_RETRIED for
    ``RETRY_WAIT``, EXECUTION_DEAD_LETTERED for ``DEAD_LETTERED`` (nothing for other statuses).

    ``source`` (an ``UPDATE chrono_execution … RETURNING``) must return ``execution_id, job_id,
    tenant_id, attempt, status, error, reason``; the error and reason go into the failure's and
    the follow-up's documents. One call in the CTE of the statement that ends the attempt::

        WITH e AS (UPDATE chrono_execution SET status = … RETURNING execution_id, job_id,
                   tenant_id, attempt, status, error, reason),
        a AS ({attempt_ended("e", failure_action=EXECUTION_FAILED, actor="'worker:' || …")})
        SELECT attempt FROM e
    """
    details = (
        f"jsonb_strip_nulls(jsonb_build_object('attempt', {source}.attempt, 'error', "
        f"NULLIF({source}.error, ''), 'reason', NULLIF({source}.reason, '')))"
    )
    return insert_rows(
        select_rows(source, action_name=failure_action, actor=actor, occurred_at=occurred_at,
                    execution_id=f"{source}.execution_id", data=details,
                    where=f"{source}.status IN ('RETRY_WAIT', 'DEAD_LETTERED', 'FAILED', "
                          "'LOST')"),
        select_rows(
            source,
            action_sql=(f"(CASE {source}.status WHEN 'RETRY_WAIT' THEN '{EXECUTION_RETRIED}' "
                        f"ELSE '{EXECUTION_DEAD_LETTERED}' END)"),
            actor=actor, occurred_at=occurred_at, execution_id=f"{source}.execution_id",
            data=details, where=f"{source}.status IN ('RETRY_WAIT', 'DEAD_LETTERED')",
        ),
    )


def outcome_case(action_expr: str) -> str:
    """SQL giving the outcome of the action named by ``action_expr``."""
    whens = " ".join(f"WHEN '{a.name}' THEN '{a.outcome}'" for a in ACTIONS.values())
    return f"(CASE {action_expr} {whens} ELSE '{UNKNOWN}' END)"
