"""PostgreSQL side of dispatch: what the beat reads and writes for a batch of claimed timers.

Two round trips per batch, whatever its size: one statement loads the jobs and inserts their
executions (``SCHEDULED``, before publishing, so a worker always finds the row it must start); after
RabbitMQ confirmed the batch, one statement marks them ``DISPATCHED`` and moves each job to its next
occurrence (one-time jobs become ``COMPLETED``) with conditional updates. The audit rows of these
transitions (:mod:`search.audit`) are written by the same statements, from the rows they changed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from django.db import connection

from scheduler import prepared
from scheduler.clock import datetime_to_ms, ms_to_datetime
from scheduler.lifecycle import (
    CANCELLED_AUDIT,
    IN_FLIGHT,
    LOCK_KEYED_EXECUTIONS_IN_ORDER,
    NOT_STARTED,
    announce_cancel,
    execution_id_for,
    execution_id_text,
    key_range,
    sql_statuses,
)
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.models import JobStatus
from scheduler.retry import RetryPolicy, effective_policy
from scheduler.schedules import Schedule, job_schedule
from search import audit

_IN_FLIGHT = sql_statuses(IN_FLIGHT)
_NOT_STARTED = sql_statuses(NOT_STARTED)


@dataclass(frozen=True, slots=True)
class DueJob:
    """The fields of a job the beat needs to publish one of its occurrences."""

    job_id: str
    tenant_id: str
    job_type: str
    args_json: str  # as stored: passed into the message body without decoding
    kwargs_json: str
    queue: str
    cron_expression: str | None
    timezone: str
    status: str
    next_run_ms: int | None
    misfire: MisfireRule
    jitter_ms: int
    retry: RetryPolicy
    soft_timeout_ms: int | None
    hard_timeout_ms: int | None
    overlap_policy: str
    idempotency_key: str | None
    interval_ms: int | None = None
    anchor_ms: int | None = None
    calendars: tuple[str, ...] = ()  # names of the tenant's exclusion calendars

    @property
    def is_active(self) -> bool:
        return self.status == JobStatus.ACTIVE

    @property
    def is_recurring(self) -> bool:
        return bool(self.cron_expression or self.interval_ms)

    @property
    def schedule(self) -> Schedule | None:
        """The job's cron (H hashed from its id) or interval; None for a one-time job."""
        return job_schedule(job_id=self.job_id, cron_expression=self.cron_expression,
                            timezone=self.timezone, interval_ms=self.interval_ms,
                            anchor_ms=self.anchor_ms)


_JOB_COLUMNS = (
    "j.job_id, j.tenant_id, j.job_type, j.args, j.kwargs, j.queue, j.cron_expression, "
    "j.timezone, j.status, j.next_run_at, j.misfire_policy, j.misfire_fire_all_limit, "
    "j.jitter_ms, j.retry_policy, j.max_retries, j.soft_timeout_ms, j.hard_timeout_ms, "
    "j.overlap_policy, j.idempotency_key, j.interval_ms, j.interval_anchor, j.calendars"
)


def _due_job(row: tuple) -> DueJob:
    job_id, tenant_id, job_type, args, kwargs, queue, cron, tz, status, next_run = row[:10]
    (policy, fire_all_limit, jitter_ms, retry_policy, max_retries, soft, hard, overlap,
     idempotency_key, interval_ms, interval_anchor, calendars) = row[10:]
    return DueJob(
        job_id=job_id,
        tenant_id=tenant_id,
        job_type=job_type,
        args_json=_json_text(args),
        kwargs_json=_json_text(kwargs),
        queue=queue,
        cron_expression=cron,
        timezone=tz,
        status=status,
        next_run_ms=next_run,
        misfire=MisfireRule(MisfirePolicy(policy), max(1, fire_all_limit)),
        jitter_ms=jitter_ms,
        retry=_retry_policy(_json_text(retry_policy), max_retries),
        soft_timeout_ms=soft,
        hard_timeout_ms=hard,
        overlap_policy=overlap,
        idempotency_key=idempotency_key,
        interval_ms=interval_ms,
        anchor_ms=None if interval_anchor is None else datetime_to_ms(interval_anchor),
        calendars=tuple(calendars) if calendars else (),
    )


def _json_text(value: object) -> str:
    # Django's psycopg setup hands jsonb over as text; keep it so.
    return value if isinstance(value, str) else json.dumps(value)


@lru_cache(maxsize=4_096)
def _retry_policy(policy_json: str, max_retries: int) -> RetryPolicy:
    return effective_policy(json.loads(policy_json), max_retries)


def load_and_insert(claimed: Sequence[tuple[str, int]]) -> dict[str, DueJob]:
    """For claimed timers ``(job id, fire ms)``: insert a ``SCHEDULED`` execution for every
    one whose job is ACTIVE with ``next_run_at`` equal to the fire time (an id that exists, a
    re-publish, is left as it is), and return the jobs keyed by id (missing ids were deleted).

    One statement, so one round trip: the jobs are read and locked ``FOR KEY SHARE`` once
    (``j``), and both the insert and the answer come from those rows, so the jobs the caller
    decides to publish are exactly those that got their execution row. The lock stands in for
    a foreign key (which checked each row with a query of its own, at twice the cost of the
    insert): a job being deleted (``api.delete`` locks it ``FOR UPDATE`` first) is waited for
    and then left out, so no execution outlives its job.
    """
    if not claimed:
        return {}
    # The ids as text (PostgreSQL's cast checks them: a timer id that is not one is refused
    # with its batch, which the beat then splits); the times as epoch ms.
    job_ids = prepared.array(job_id for job_id, _ in claimed)
    with prepared.cursor() as cursor:
        cursor.execute(
            "WITH x AS (SELECT execution_id, job_id, "
            # nosec B608 # _JOB_COLUMNS and MS_TIME are module constants; values are parameters
            f"  {prepared.MS_TIME.format('fired_ms')} AS fired_at "
            "  FROM unnest(%s::uuid[], %s::uuid[], %s::bigint[]) "
            "  AS x(execution_id, job_id, fired_ms)), "
            f"j AS (SELECT {_JOB_COLUMNS} FROM chrono_job j WHERE j.job_id = ANY(%s::uuid[]) "
            "  FOR KEY SHARE), "
            # The conflict target is the partitioned table's primary key (the partition key
            # must be in it): the execution id is derived from the fire time, so the pair is
            # as unique as the id (migration 0015).
            "ins AS (INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
            "  scheduled_for, status, error, logs_url, fencing_token) "
            "  SELECT x.execution_id, j.job_id, j.tenant_id, 1, x.fired_at, 'SCHEDULED', '', '', 0 "
            "  FROM x JOIN j ON j.job_id = x.job_id "
            "  WHERE j.status = 'ACTIVE' AND j.next_run_at = x.fired_at "
            "  ON CONFLICT (execution_id, scheduled_for) DO NOTHING) "
            f"SELECT {_ANSWER_COLUMNS} FROM j",
            [
                _text_array(execution_id_text(job_id, fire_ms) for job_id, fire_ms in claimed),
                job_ids,
                prepared.ms_array(fire_ms for _, fire_ms in claimed),
                job_ids,
            ],
            rows=len(claimed),
        )
        return {row[0]: _due_job(row) for row in cursor.fetchall()}


# The jobs as load_and_insert answers them: the ids as text and the next fire time in epoch ms
# (what the beat uses), not as objects psycopg builds and the beat turns back into those.
_ANSWER_COLUMNS = ", ".join(
    {"j.job_id": "j.job_id::text", "j.tenant_id": "j.tenant_id::text",
     # Truncated to the millisecond, as datetime_to_ms does.
     "j.next_run_at": "floor(extract(epoch FROM j.next_run_at) * 1000)::bigint",
     }.get(column, column)
    for column in _JOB_COLUMNS.split(", "))


def _text_array(texts: Iterable[str]) -> str:
    """An array literal of texts that need no quoting (ids this module made)."""
    return "{" + ",".join(texts) + "}"


class JobAdvance(NamedTuple):
    """A job to move on after its occurrence ``fired_ms`` was confirmed at ``confirmed_ms``:
    to ``next_ms``, or, None, to COMPLETED (a one-time job)."""

    job_id: str
    fired_ms: int
    next_ms: int | None
    confirmed_ms: int


class Dispatched(NamedTuple):
    """An occurrence RabbitMQ confirmed: its execution (a UUID or its text), fired at
    ``fire_ms`` (its ``scheduled_for``, the partition key), confirmed at ``confirmed_ms``."""

    execution_id: uuid.UUID | str
    fire_ms: int
    confirmed_ms: int


class PlannedOccurrence(NamedTuple):
    """An occurrence a misfire or overlap decision wrote down: fired (``skip_reason`` None)
    or skipped for the reason given."""

    job: DueJob
    fire_ms: int
    skip_reason: str | None


def record_dispatched(
    dispatched: Sequence[Dispatched | tuple[uuid.UUID | str, int, int]],
    *,
    advances: Sequence[JobAdvance],
) -> set[str]:
    """After RabbitMQ confirmed their publish: mark executions ``DISPATCHED`` (unless a worker
    already started them) and advance each job whose ``next_run_at`` still equals the fired
    occurrence. Returns the ids of the jobs advanced. One statement (both updates commit
    together or not at all), one round trip, for any number of confirmed batches; the
    executions are named by ``(execution_id, scheduled_for)`` and the days of the batch's
    first and last fire time (:func:`~scheduler.lifecycle.key_range`), so PostgreSQL touches
    those days' partitions alone."""
    fire_ms = [ms for _, ms, _ in dispatched]
    first, last = (key_range((ms_to_datetime(min(fire_ms)), ms_to_datetime(max(fire_ms))))
                   if fire_ms else (None, None))
    ms_time = prepared.MS_TIME.format
    with prepared.cursor() as cursor:
        cursor.execute(
            # The times as epoch ms, turned into timestamps here (prepared.ms_array).
            f"WITH d AS (SELECT execution_id, {ms_time('scheduled_ms')} AS scheduled_for, "
            # nosec B608 # the lock, audit and time SQL are module constants; values are parameters
            f"  {ms_time('confirmed_ms')} AS confirmed_at "
            "  FROM unnest(%s::uuid[], %s::bigint[], %s::bigint[]) "
            "  AS d(execution_id, scheduled_ms, confirmed_ms)), "
            f"l AS ({LOCK_KEYED_EXECUTIONS_IN_ORDER.format(keys='d', first='%s', last='%s')}), "
            "e AS (UPDATE chrono_execution AS c SET dispatched_at = d.confirmed_at, status = CASE "
            "  WHEN c.status = 'SCHEDULED' THEN 'DISPATCHED' ELSE c.status END "
            "  FROM d JOIN l USING (execution_id, scheduled_for) "
            "  WHERE c.execution_id = d.execution_id AND c.scheduled_for = d.scheduled_for "
            "  AND c.scheduled_for BETWEEN %s::timestamptz AND %s::timestamptz "
            "  AND c.dispatched_at IS NULL "
            "  RETURNING c.execution_id, c.job_id, c.tenant_id, c.attempt, c.scheduled_for, "
            "  c.dispatched_at), "
            "j AS (UPDATE chrono_job AS j SET next_run_at = x.next_run_at, updated_at = now(), "
            "status = CASE WHEN x.next_run_at IS NULL THEN 'COMPLETED' ELSE j.status END "
            f"FROM (SELECT job_id, {ms_time('fired_ms')} AS fired_at, "
            f"  {ms_time('next_ms')} AS next_run_at, {ms_time('confirmed_ms')} AS confirmed_at "
            "  FROM unnest(%s::uuid[], %s::bigint[], %s::bigint[], %s::bigint[]) "
            "  AS u(job_id, fired_ms, next_ms, confirmed_ms)) AS x "
            "WHERE j.job_id = x.job_id AND j.status = 'ACTIVE' AND j.next_run_at = x.fired_at "
            # The main query reads j, so PostgreSQL updates the jobs before e runs: this
            # makes it lock every execution of the batch (l, in id order) first, the order
            # a worker's end of a failed attempt takes them in (the execution, then its job's
            # retry count); in the other order the two deadlocked.
            "AND (SELECT count(*) FROM l) >= 0 "
            "RETURNING j.job_id, j.tenant_id, j.status, j.updated_at, x.confirmed_at), "
            f"a AS ({_DISPATCHED_AUDIT}) "
            "SELECT job_id::text FROM j",
            [
                prepared.array(execution_id for execution_id, _, _ in dispatched),
                prepared.ms_array(fire_ms),
                prepared.ms_array(ms for _, _, ms in dispatched),
                first, last, first, last,
                prepared.array(job_id for job_id, _, _, _ in advances),
                prepared.ms_array(fired_ms for _, fired_ms, _, _ in advances),
                prepared.ms_array(nxt for _, _, nxt, _ in advances),
                prepared.ms_array(ms for _, _, _, ms in advances),
            ],
            rows=max(len(dispatched), len(advances)),
        )
        return {row[0] for row in cursor.fetchall()}


def record_misfires(occurrences: Sequence[PlannedOccurrence]) -> None:
    """Write the executions of a misfire plan: those to fire are inserted ``SCHEDULED``, the
    skipped ones ``SKIPPED`` with their reason (a row the claim inserted as ``SCHEDULED`` is
    turned ``SKIPPED``). One statement."""
    if not occurrences:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH i AS (INSERT INTO chrono_execution (execution_id, job_id, tenant_id, attempt, "
            # nosec B608 # the audit SQL is built from module constants; every value is a parameter
            "scheduled_for, status, reason, error, logs_url, fencing_token, finished_at) "
            "SELECT e, j, t, 1, s, st, r, '', '', 0, CASE WHEN st = 'SKIPPED' THEN now() END "
            "FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::timestamptz[], %s::text[], "
            "%s::text[]) AS x(e, j, t, s, st, r) "
            # Only for jobs that still exist, locked against deletion (see load_and_insert).
            "WHERE j IN (SELECT job_id FROM chrono_job WHERE job_id = ANY(%s::uuid[]) "
            "FOR KEY SHARE) "
            "ON CONFLICT (execution_id, scheduled_for) DO UPDATE SET status = EXCLUDED.status, "
            "reason = EXCLUDED.reason, finished_at = EXCLUDED.finished_at "
            "WHERE chrono_execution.status = 'SCHEDULED' AND EXCLUDED.status = 'SKIPPED' "
            "RETURNING execution_id, job_id, tenant_id, attempt, scheduled_for, status, reason, "
            "finished_at), "
            "sk AS (SELECT * FROM unnest(%s::uuid[], %s::text[]) AS sk(execution_id, action)) "
            + _SKIPPED_AUDIT,
            [
                [execution_id_for(job.job_id, ms) for job, ms, _ in occurrences],
                [uuid.UUID(job.job_id) for job, _, _ in occurrences],
                [uuid.UUID(job.tenant_id) for job, _, _ in occurrences],
                [ms_to_datetime(ms) for _, ms, _ in occurrences],
                ["SCHEDULED" if reason is None else "SKIPPED" for _, _, reason in occurrences],
                [reason or "" for _, _, reason in occurrences],
                [uuid.UUID(job.job_id) for job, _, _ in occurrences],
                [execution_id_for(job.job_id, ms) for job, ms, r in occurrences if r],
                [audit.skip_action(r) for _, _, r in occurrences if r],
            ],
        )


# Audit rows of the statements above (search.audit), written by the same statement.
_DISPATCHED_AUDIT = audit.insert_rows(audit.select_rows(
    "e",
    action_name=audit.EXECUTION_DISPATCHED,
    actor=f"'{audit.BEAT_ACTOR}'",
    occurred_at="e.dispatched_at",
    execution_id="e.execution_id",
    data="jsonb_build_object('attempt', e.attempt, 'scheduled_for', e.scheduled_for, "
    "'lateness_ms', (extract(epoch FROM e.dispatched_at - e.scheduled_for) * 1000)::bigint)",
), audit.select_rows(  # one-time jobs done: after their dispatch, in the same INSERT
    "j",
    action_name=audit.JOB_COMPLETED,
    actor=f"'{audit.BEAT_ACTOR}'",
    occurred_at="j.confirmed_at",  # the confirm time, as for the dispatch
    where="j.status = 'COMPLETED'",
))
_SKIPPED_AUDIT = audit.insert_select(
    "i JOIN sk USING (execution_id)",
    action_sql="sk.action",
    actor=f"'{audit.BEAT_ACTOR}'",
    occurred_at="statement_timestamp()",
    execution_id="i.execution_id",
    data="jsonb_build_object('attempt', i.attempt, 'scheduled_for', i.scheduled_for, "
    "'reason', i.reason)",
    where="i.status = 'SKIPPED'",
)


def active_executions(
    job_ids: Sequence[str], *, exclude: Sequence[uuid.UUID]
) -> dict[str, list[tuple[uuid.UUID, str]]]:
    """Executions of these jobs that are waiting or running, but for ``exclude``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, execution_id, status FROM chrono_execution WHERE job_id = ANY(%s) "
            # nosec B608 # a status list of scheduler.lifecycle's constants; values are parameters
            f"AND status IN ({_IN_FLIGHT}) "
            "AND NOT execution_id = ANY(%s)",
            [[uuid.UUID(j) for j in job_ids], list(exclude)],
        )
        active: dict[str, list[tuple[uuid.UUID, str]]] = {}
        for job_id, execution_id, status in cursor.fetchall():
            active.setdefault(str(job_id), []).append((execution_id, status))
        return active


def changed_jobs(planned: Sequence[tuple[str, int]]) -> dict[str, tuple[str | None, int | None]]:
    """Of the jobs of ``planned`` occurrences ``(job id, fire ms)``: those no longer ACTIVE
    with that next fire time, as ``{job id: (status, next fire ms)}`` (``(None, None)``: the
    job was deleted). One statement; an unchanged job costs an index probe and no row back."""
    with prepared.cursor() as cursor:
        cursor.execute(
            "SELECT x.job_id::text, j.status, "
            "(extract(epoch FROM j.next_run_at) * 1000)::bigint "
            "FROM unnest(%s::uuid[], %s::timestamptz[]) AS x(job_id, fire_at) "
            "LEFT JOIN chrono_job j ON j.job_id = x.job_id "
            "WHERE j.job_id IS NULL OR j.status <> 'ACTIVE' "
            "OR j.next_run_at IS DISTINCT FROM x.fire_at",
            # The ids are the canonical text of UUIDs already (DueJob.job_id): no parsing.
            ["{" + ",".join(job_id for job_id, _ in planned) + "}",
             prepared.array(ms_to_datetime(fire_ms) for _, fire_ms in planned)],
            rows=len(planned))
        return {job_id: (status, next_ms) for job_id, status, next_ms in cursor.fetchall()}


def forget_scheduled(occurrences: Sequence[tuple[str, int]]) -> None:
    """Delete rows inserted for occurrences ``(execution id, fire ms)`` that are held back
    before publishing (they never left ``SCHEDULED``, so nothing happened to them); the fire
    time is the partition key."""
    if occurrences:
        times = [ms_to_datetime(fire_ms) for _, fire_ms in occurrences]
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM chrono_execution e USING unnest(%s::uuid[], %s::timestamptz[]) "
                "AS k(execution_id, scheduled_for) WHERE e.execution_id = k.execution_id "
                "AND e.scheduled_for = k.scheduled_for "
                "AND e.scheduled_for BETWEEN %s AND %s AND e.status = 'SCHEDULED'",
                [[uuid.UUID(i) for i, _ in occurrences], times, *key_range(times)],
            )


def cancel_previous(job_ids: Sequence[str], *, exclude: Sequence[uuid.UUID]) -> None:
    """Overlap policy ``cancel_previous``: earlier waiting occurrences are cancelled, running
    ones are asked to stop (announced to their workers)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE chrono_execution SET status = 'CANCELLED', finished_at = now(), "
            # nosec B608 # CANCELLED_AUDIT is a module constant
            "reason = 'replaced by a newer occurrence (overlap policy cancel_previous)' "
            f"WHERE job_id = ANY(%s) AND status IN ({_NOT_STARTED}) "
            "AND NOT execution_id = ANY(%s) "
            "RETURNING execution_id, job_id, tenant_id, attempt, reason, finished_at) "
            + CANCELLED_AUDIT,
            [[uuid.UUID(j) for j in job_ids], list(exclude), audit.BEAT_ACTOR],
        )
        cursor.execute(
            "UPDATE chrono_execution SET cancel_requested_at = now(), "
            "reason = 'replaced by a newer occurrence (overlap policy cancel_previous)' "
            "WHERE job_id = ANY(%s) AND status = 'RUNNING' AND cancel_requested_at IS NULL "
            "RETURNING execution_id",
            [[uuid.UUID(j) for j in job_ids]],
        )
        running = [str(row[0]) for row in cursor.fetchall()]
    announce_cancel(running)

