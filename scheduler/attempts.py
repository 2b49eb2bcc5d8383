"""What happens when an attempt ends badly: another attempt after a backoff, or the end.

A failed attempt (the task raised) or a lost one (its lease expired; its worker died) moves, in one
conditional update guarded by the fencing token, either to ``RETRY_WAIT`` with ``attempt + 1``
and a ``retry_at``, or to its end: ``DEAD_LETTERED`` when a retry policy gave up (attempts
exhausted, or a non-retryable error), ``FAILED`` when the job never asked for retries. The next
attempt is then sent with :func:`send_attempt`: at once, through a RabbitMQ retry tier, or, for
long delays, through the timer store (timer id ``<execution id>#<attempt>``).

A failure is recorded in two parts (:mod:`scheduler.failures`): ``error``, what the execution's
tenant sees, and ``traceback``, for platform staff only.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from django.db import connection

from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.dispatch import Publisher, TaskMessage
from scheduler.failures import ERROR_MAX_CHARS, TRACEBACK_MAX_CHARS
from scheduler.lifecycle import (
    DELIVERED,
    LOCK_EXECUTIONS_IN_ORDER,
    LOCK_KEYED_EXECUTIONS_IN_ORDER,
    RetryTimer,
    key_range,
    retry_timer_id,
    sql_statuses,
)
from scheduler.retry import RetryPolicy, effective_policy, retry_tier_ms
from scheduler.timers import TimerStore
from search import audit

_rng = random.SystemRandom()
_DELIVERED = sql_statuses(DELIVERED)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Where a failed or lost attempt went: ``status`` is RETRY_WAIT, DEAD_LETTERED or FAILED."""

    execution_id: str
    status: str
    attempt: int
    retry_at_ms: int | None = None
    delay_ms: int | None = None
    scheduled_for: datetime | None = None  # the partition key, as the row has it


def decide(
    policy: RetryPolicy, *, attempt: int, error_type: str, now: int, rng: random.Random = _rng
) -> tuple[str, int | None, str]:
    """``(status, delay ms or None, reason)`` after ``attempt`` failed with ``error_type``."""
    if policy.should_retry(failed_attempt=attempt, error_type=error_type):
        return "RETRY_WAIT", policy.delay_ms(attempt + 1, rng), ""
    if policy.is_non_retryable(error_type):
        return "DEAD_LETTERED", None, f"{error_type} is not retryable"
    if policy.max_attempts == 1:
        return "FAILED", None, ""
    return "DEAD_LETTERED", None, f"gave up after {attempt} attempts"


def end_attempt(
    execution_id: str,
    *,
    fencing_token: int,
    from_status: str,
    attempt: int,
    policy: RetryPolicy,
    error: str,
    error_type: str,
    traceback: str = "",
    reason_prefix: str = "",
    audit_action: str = audit.EXECUTION_FAILED,
    actor: str = "worker",
    rng: random.Random = _rng,
    scheduled_for: datetime | None = None,
) -> Outcome | None:
    """Move an attempt that failed or was lost (``from_status`` RUNNING) to its next state,
    with its audit rows (failed or lost, then retried or dead-lettered) in the same statement;
    None when the fencing check refused it (another attempt owns the execution now).
    ``error`` is what the tenant sees (it goes into the audit rows too), ``traceback`` what
    platform staff see. ``scheduled_for``, the execution's partition key, confines the
    statement to its day (None: it names the id alone)."""
    now = now_ms()
    status, delay_ms, reason = decide(policy, attempt=attempt, error_type=error_type, now=now,
                                      rng=rng)
    retry_at = None if delay_ms is None else now + delay_ms
    reason = f"{reason_prefix}{reason}".strip("; ")
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH e AS (UPDATE chrono_execution SET status = %s, error = %s, traceback = %s, "
            # nosec B608 # audit.attempt_ended() of module constants; values are parameters
            "reason = %s, "
            "exit_code = 1, lease_expires_at = NULL, fencing_token = fencing_token + 1, "
            "finished_at = CASE WHEN %s = 'RETRY_WAIT' THEN NULL ELSE %s END, "
            "retry_at = %s, attempt = attempt + CASE WHEN %s = 'RETRY_WAIT' THEN 1 ELSE 0 END "
            "WHERE execution_id = %s AND fencing_token = %s AND status = %s AND attempt = %s "
            f"{'' if scheduled_for is None else 'AND scheduled_for = %s '}"
            "RETURNING execution_id, job_id, tenant_id, attempt, status, error, reason, "
            "scheduled_for), "
            f"a AS ({audit.attempt_ended('e', failure_action=audit_action, actor='%s')}), "
            "j AS (UPDATE chrono_job SET retry_count = retry_count + 1 FROM e "
            "WHERE chrono_job.job_id = e.job_id AND %s = 'RETRY_WAIT') "
            "SELECT attempt, scheduled_for FROM e",
            [
                status, error[:ERROR_MAX_CHARS], traceback[-TRACEBACK_MAX_CHARS:], reason[:300],
                status, ms_to_datetime(now),
                None if retry_at is None else ms_to_datetime(retry_at), status,
                uuid.UUID(execution_id), fencing_token, from_status, attempt,
                *([] if scheduled_for is None else [scheduled_for]),
                *[actor] * audit.attempt_ended("e", failure_action=audit_action,
                                               actor="%s").count("%s"),
                status,
            ],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return Outcome(execution_id, status, row[0], retry_at, delay_ms, row[1])


UNREGISTERED_TASK_ERROR_TYPE = "celery.exceptions.NotRegistered"


def unregistered_task_error(task_name: str, worker_id: str) -> str:
    return (f"NotRegistered: task {task_name!r} is not registered on worker {worker_id}: import "
            "its module in that worker (chrono worker --include MODULE, or the app's imports), "
            "or route the job to a queue whose workers have it")


def fail_unregistered_task(
    execution_id: str, *, attempt: int, task_name: str, worker_id: str,
    scheduled_for: datetime | None = None,
) -> bool:
    """End a delivered attempt whose task the receiving worker does not know: FAILED, not
    retried, since every worker of a deployment's queue runs the same code and would refuse it
    again (:func:`fail_delivered_attempt`)."""
    return fail_delivered_attempt(
        execution_id, attempt=attempt, worker_id=worker_id,
        error=unregistered_task_error(task_name, worker_id),
        error_type=UNREGISTERED_TASK_ERROR_TYPE, reason="task not registered on worker",
        scheduled_for=scheduled_for,
    )


NOT_GRANTED_ERROR_TYPE = "scheduler.errors.TaskNotGranted"


def fail_ungranted_task(execution_id: str, *, attempt: int, message: str,
                        worker_id: str, scheduled_for: datetime | None = None) -> bool:
    """End a delivered attempt whose tenant was not granted its task or queue: FAILED, not
    retried, the task's body never run; ``message`` (the grant refusal) is its error."""
    return fail_delivered_attempt(
        execution_id, attempt=attempt, worker_id=worker_id,
        error=f"TaskNotGranted: {message}", error_type=NOT_GRANTED_ERROR_TYPE,
        reason="task not granted to the tenant", scheduled_for=scheduled_for,
    )


def fail_delivered_attempt(execution_id: str, *, attempt: int, worker_id: str, error: str,
                           error_type: str, reason: str,
                           scheduled_for: datetime | None = None) -> bool:
    """End a delivered attempt that may not run, before it starts: FAILED with ``error``, not
    retried. The message can arrive before the beat's recorder marked the execution DISPATCHED,
    so SCHEDULED is accepted too, as a start is. False when the execution had moved on at that
    attempt (cancelled meanwhile, or a redelivery of a message already handled).
    ``scheduled_for`` is the partition key its message carries; as for a start, one not found
    by it is looked for by id alone (a rare path: a task nobody may run here)."""
    # The recorder may mark the execution DISPATCHED between the read and the end (the
    # message outran its confirm): the end, conditional on the status read, then matches
    # nothing, and is tried again on the status it has now. The recorder moves a status once
    # (SCHEDULED to DISPATCHED), so a second try settles it.
    for _ in range(2):
        row = _delivered_attempt(execution_id, attempt=attempt, scheduled_for=scheduled_for)
        if row is None:
            return False
        fencing_token, status, row_scheduled_for = row
        outcome = end_attempt(
            execution_id, fencing_token=fencing_token, from_status=status, attempt=attempt,
            policy=RetryPolicy(max_attempts=1), error=error, error_type=error_type,
            reason_prefix=reason, actor=f"worker:{worker_id}", scheduled_for=row_scheduled_for,
        )
        if outcome is not None:
            return True
        if status != "SCHEDULED":
            return False
    return False


def _delivered_attempt(execution_id: str, *, attempt: int,
                       scheduled_for: datetime | None) -> tuple[int, str, datetime] | None:
    """``(fencing token, status, scheduled_for)`` of the execution while ``attempt`` of it is
    delivered and not started; by its partition key first, then by id alone."""
    with connection.cursor() as cursor:
        for key in ([scheduled_for] if scheduled_for is not None else []) + [None]:
            cursor.execute(
                "SELECT fencing_token, status, scheduled_for FROM chrono_execution "
                # nosec B608 # a status list of scheduler.lifecycle's constants; values are params
                f"WHERE execution_id = %s {'' if key is None else 'AND scheduled_for = %s '}"
                f"AND status IN ({_DELIVERED}) AND attempt = %s",
                [uuid.UUID(execution_id), *([] if key is None else [key]), attempt],
            )
            if (row := cursor.fetchone()) is not None:
                return row
    return None


def send_attempt(
    message: TaskMessage, outcome: Outcome, *, publisher: Publisher, store: TimerStore
) -> str:
    """Send the next attempt of a ``RETRY_WAIT`` execution; returns how (for the log)."""
    tier = retry_tier_ms(outcome.delay_ms or 0)
    if tier is None:
        store.add([(retry_timer_id(outcome.execution_id, outcome.attempt,
                                   _ms_or_none(outcome.scheduled_for)), outcome.retry_at_ms)])
        return "timer store"
    publisher.publish_batch([message], retry_tier_ms=tier)
    return f"retry tier {tier} ms" if tier else "at once"


def next_attempt_message(message: TaskMessage, attempt: int) -> TaskMessage:
    """The same task message, for ``attempt``."""
    headers = {**message.chrono_headers, "chrono_attempt": attempt}
    return TaskMessage(task_id=message.task_id, task_name=message.task_name, queue=message.queue,
                       args=message.args, kwargs=message.kwargs, chrono_headers=headers,
                       soft_timeout_ms=message.soft_timeout_ms,
                       hard_timeout_ms=message.hard_timeout_ms)


@lru_cache(maxsize=4_096)  # one per distinct policy: most jobs share a handful
@lru_cache(maxsize=1_024)
def policy_header(policy: RetryPolicy) -> str:
    """The ``chrono_retry_policy`` header of ``policy`` (remembered: the beat writes one per
    message, and a batch's jobs share a few policies)."""
    return json.dumps(policy.to_json(), separators=(",", ":"))


ATTEMPT_COLUMNS = (
    "e.execution_id, e.attempt, e.fencing_token, e.worker_id, e.scheduled_for, "
    "e.cancel_requested_at, "
    "j.job_id, j.tenant_id, j.job_type, j.args, j.kwargs, j.queue, j.retry_policy, "
    "j.max_retries, j.soft_timeout_ms, j.hard_timeout_ms"
)


@dataclass(frozen=True)
class AttemptRow:
    execution_id: str
    attempt: int
    fencing_token: int
    worker_id: str | None
    scheduled_for_ms: int
    cancel_requested: bool
    job_id: str
    tenant_id: str
    job_type: str
    args: list
    kwargs: dict
    queue: str
    retry_policy: dict
    max_retries: int
    soft_timeout_ms: int | None
    hard_timeout_ms: int | None
    scheduled_for: datetime | None = None  # the partition key, as the row has it

    @classmethod
    def from_db(cls, row: tuple) -> AttemptRow:
        (execution_id, attempt, token, worker_id, scheduled_for, cancel_requested_at, job_id,
         tenant_id, job_type, args, kwargs, queue, retry_policy, max_retries, soft, hard) = row
        return cls(str(execution_id), attempt, token, worker_id, datetime_to_ms(scheduled_for),
                   cancel_requested_at is not None,
                   str(job_id), str(tenant_id), job_type, _decoded(args),
                   _decoded(kwargs), queue, _decoded(retry_policy) or {}, max_retries,
                   soft, hard, scheduled_for)

    def message(self, attempt: int) -> TaskMessage:
        return TaskMessage(
            task_id=self.execution_id,
            task_name=self.job_type,
            queue=self.queue,
            args=self.args,
            kwargs=self.kwargs,
            soft_timeout_ms=self.soft_timeout_ms,
            hard_timeout_ms=self.hard_timeout_ms,
            chrono_headers={
                "chrono_execution_id": self.execution_id,
                "chrono_job_id": self.job_id,
                "chrono_tenant_id": self.tenant_id,
                "chrono_attempt": attempt,
                "chrono_fire_ms": self.scheduled_for_ms,
                "chrono_retry_policy": policy_header(
                    effective_policy(self.retry_policy, self.max_retries)
                ),
            },
        )


def _decoded(value: object) -> object:
    # psycopg returns jsonb already decoded; a text column would need json.loads.
    return json.loads(value) if isinstance(value, str) else value


def _ms_or_none(value: datetime | None) -> int | None:
    return None if value is None else datetime_to_ms(value)


def load_waiting(timers: list[RetryTimer]) -> list[AttemptRow]:
    """The ``RETRY_WAIT`` executions of retry timers (execution id, attempt and, in a timer
    written since the table was partitioned, ``scheduled_for`` ms) still waiting for exactly
    that attempt, with what their messages need. A timer with its key is looked up in its
    day; one without, or one its key did not find, by id alone."""
    if not timers:
        return []
    keyed = [t for t in timers if t.scheduled_for_ms is not None]
    rows = _waiting(keyed, keyed=True) if keyed else []
    found = {row.execution_id for row in rows}
    again = [t for t in timers if t.execution_id not in found]
    return rows + (_waiting(again, keyed=False) if again else [])


def _waiting(timers: list[RetryTimer], *, keyed: bool) -> list[AttemptRow]:
    arrays = [[uuid.UUID(t.execution_id) for t in timers], [t.attempt for t in timers]]
    if keyed:
        times = [ms_to_datetime(t.scheduled_for_ms) for t in timers]  # type: ignore[arg-type]
        key = ("AND x.scheduled_for = e.scheduled_for "
               "AND e.scheduled_for BETWEEN %s::timestamptz AND %s::timestamptz ")
        params = [*arrays, times, *key_range(times)]
        columns = "%s::uuid[], %s::int[], %s::timestamptz[]) AS x(execution_id, attempt, " \
                  "scheduled_for) "
    else:
        key, params = "", arrays
        columns = "%s::uuid[], %s::int[]) AS x(execution_id, attempt) "
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM chrono_execution e "
            # nosec B608 # ATTEMPT_COLUMNS and the key are module constants; values are params
            "JOIN chrono_job j ON j.job_id = e.job_id "
            f"JOIN unnest({columns}"
            f"ON x.execution_id = e.execution_id AND x.attempt = e.attempt {key}"
            "WHERE e.status = 'RETRY_WAIT'",
            params,
        )
        return [AttemptRow.from_db(row) for row in cursor.fetchall()]


def mark_dispatched(rows: list[AttemptRow], *, at_ms: int) -> None:
    """Attempts published from ``RETRY_WAIT``: ``DISPATCHED`` (unless a worker started them).
    The rows carry their partition key (they were read from the table), so the statement
    touches their days alone."""
    if not rows:
        return
    times = [r.scheduled_for for r in rows]
    keyed = all(t is not None for t in times)
    if keyed:
        first, last = key_range(times)  # type: ignore[arg-type]
        lock = LOCK_KEYED_EXECUTIONS_IN_ORDER.format(keys="k", first="%s", last="%s")
        keys = ("k AS (SELECT * FROM unnest(%s::uuid[], %s::timestamptz[]) "
                "AS k(execution_id, scheduled_for)), ")
        join = ("FROM l WHERE e.execution_id = l.execution_id "
                "AND e.scheduled_for = l.scheduled_for "
                "AND e.scheduled_for BETWEEN %s::timestamptz AND %s::timestamptz ")
        params = [[uuid.UUID(r.execution_id) for r in rows], times, first, last,
                  ms_to_datetime(at_ms), first, last]
    else:
        lock, keys = LOCK_EXECUTIONS_IN_ORDER.format(ids="%s"), ""
        join = "FROM l WHERE e.execution_id = l.execution_id "
        params = [[uuid.UUID(r.execution_id) for r in rows], ms_to_datetime(at_ms)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH {keys}l AS ({lock}), "
            # nosec B608 # the lock and audit SQL are module constants; values are parameters
            "u AS (UPDATE chrono_execution AS e SET status = 'DISPATCHED', "
            f"dispatched_at = %s {join}"
            "AND e.status = 'RETRY_WAIT' "
            "RETURNING e.execution_id, e.job_id, e.tenant_id, e.attempt, e.dispatched_at) "
            + audit.insert_select(
                "u", action_name=audit.EXECUTION_DISPATCHED, actor=f"'{audit.BEAT_ACTOR}'",
                occurred_at="u.dispatched_at", execution_id="u.execution_id",
                data="jsonb_build_object('attempt', u.attempt)"),
            params,
        )
