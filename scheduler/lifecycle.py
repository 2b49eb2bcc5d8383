"""The execution lifecycle's rules: ids, states and their moves, row locks, the cancel channel.

An execution is one occurrence of a job, from the beat's insert to its end, through every attempt.
The modules that move it each own a stage and import their rules from here, never from each
other:

* :mod:`scheduler.occurrences`: the beat inserts it ``SCHEDULED`` (or ``SKIPPED``) and records
  it ``DISPATCHED`` once RabbitMQ confirmed its message; the overlap policy cancels earlier ones;
* :mod:`scheduler.executions`: a worker starts it (``RUNNING``) and records its result;
* :mod:`scheduler.attempts`: an attempt that failed or was lost goes to ``RETRY_WAIT`` (the next
  attempt) or to its end;
* :mod:`scheduler.cancellation`: a cancel ends one not started at once and asks a running one to
  stop.

**Ids.** The first attempt of an occurrence is ``uuid5(job id, fire ms)``
(:func:`execution_id_for`), the same for every publish of it, which is how the worker-side start
lets only one delivery run; later attempts keep the execution's id. An attempt that waits in the
timer store has the timer id ``<execution id>#<attempt>#<scheduled_for ms>``
(:func:`retry_timer_id`; timers written before the partitioning have no third part).

**States.** :data:`TRANSITIONS` lists every status an execution can move to from each, as the
statements of those modules make the moves (DESIGN.md, "States"); each move is one conditional
update (``WHERE status IN (…)``) with its audit row in the same statement. The status sets those
statements name are defined here, from that table (``tests/unit/test_lifecycle.py`` holds them to
it).

**Row locks.** A statement that updates several executions locks them in id order first
(:data:`LOCK_EXECUTIONS_IN_ORDER`, :data:`LOCK_KEYED_EXECUTIONS_IN_ORDER`): the beat's recorder,
a worker's batched starts and finishes and its lease renewals update the same rows at the same
moment, and two statements locking rows in different orders deadlock.

**Partition key.** ``chrono_execution`` is partitioned by day of ``scheduled_for`` (migration
0015), so a statement that names an execution by its id alone probes the primary-key index of
every day the table keeps. Every statement of the hot path therefore names the execution by
``(execution_id, scheduled_for)``, and PostgreSQL touches one day: the beat knows the fire time
it inserted, a worker the message's ``chrono_fire_ms`` header (the beat's fire time; every later
attempt's message carries the same, read back from the row) and, once started, the
``scheduled_for`` the start returned (:class:`StartedExecution`). A statement over several rows
joins them on both columns and bounds ``scheduled_for`` by the days of the batch's first and
last (:func:`key_range`): the bound prunes the days outside it when the statement is planned, and a
pair of array conditions (``execution_id = ANY(…) AND scheduled_for = ANY(…)``) would make
PostgreSQL 15's B-tree scan every combination of the two arrays.

**Cancel channel.** A running execution asked to stop is announced on :func:`cancel_channel`
(Redis pub/sub, scoped to the deployment: :mod:`scheduler.announcements`) to the worker running
it (:mod:`scheduler.leases` listens).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import NamedTuple

from chronocore.redis_client import RedisClient, redis_client
from scheduler import announcements
from scheduler.models import ExecutionStatus
from scheduler.partitions import day_bounds
from search import audit

# -- ids ------------------------------------------------------------------------------------

EXECUTION_NAMESPACE = uuid.UUID("6b1f3c0e-8d0a-4e59-9a55-0c5f7c1e2a10")
RETRY_TIMER_SEPARATOR = "#"


# The beat computes an occurrence's id when it inserts its execution, builds its message and
# records it: a uuid5 (a SHA-1) each time, unless remembered for the next few seconds of jobs.
@lru_cache(maxsize=65_536)
def execution_id_for(job_id: str, fire_at_ms: int) -> uuid.UUID:
    """The id of the first attempt of one occurrence: the same for every publish of it."""
    return uuid.uuid5(EXECUTION_NAMESPACE, f"{job_id}@{fire_at_ms}")


@lru_cache(maxsize=65_536)
def execution_id_text(job_id: str, fire_at_ms: int) -> str:
    """:func:`execution_id_for` as its canonical text, what a message and a statement carry
    (remembered too: the beat writes it into the insert, the message and the record)."""
    return str(execution_id_for(job_id, fire_at_ms))


class RetryTimer(NamedTuple):
    """What a retry timer's id says: the execution, the attempt it waits to send and, in a
    timer written since the table was partitioned, the execution's ``scheduled_for`` (ms),
    its partition key."""

    execution_id: str
    attempt: int
    scheduled_for_ms: int | None = None


def retry_timer_id(execution_id: str, attempt: int, scheduled_for_ms: int | None = None) -> str:
    """The timer store's id of ``attempt`` of an execution waiting out a long backoff:
    ``<execution id>#<attempt>[#<scheduled_for ms>]``."""
    timer_id = f"{execution_id}{RETRY_TIMER_SEPARATOR}{attempt}"
    if scheduled_for_ms is None:
        return timer_id
    return f"{timer_id}{RETRY_TIMER_SEPARATOR}{scheduled_for_ms}"


def parse_retry_timer(timer_id: str) -> RetryTimer:
    """The :class:`RetryTimer` of a :func:`retry_timer_id` (with or without its key)."""
    execution_id, attempt, *key = timer_id.split(RETRY_TIMER_SEPARATOR)
    return RetryTimer(execution_id, int(attempt), int(key[0]) if key else None)


# -- states and their moves -----------------------------------------------------------------

_S = ExecutionStatus

# What the beat inserts: an occurrence to fire, or one a misfire or overlap policy skipped.
INITIAL = frozenset({_S.SCHEDULED, _S.SKIPPED})

# From each status, the statuses a statement of the lifecycle modules may move it to.
TRANSITIONS: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    # recorded after its publish; started (a worker can be faster than the recorder); skipped
    # (a late misfire decision); cancelled; refused by the receiving worker (task unknown or
    # not granted: FAILED, never retried)
    _S.SCHEDULED: frozenset({_S.DISPATCHED, _S.RUNNING, _S.SKIPPED, _S.CANCELLED, _S.FAILED}),
    _S.DISPATCHED: frozenset({_S.RUNNING, _S.CANCELLED, _S.FAILED}),
    # published from a retry timer; started (sent at once or through a retry tier); cancelled
    _S.RETRY_WAIT: frozenset({_S.DISPATCHED, _S.RUNNING, _S.CANCELLED}),
    # finished; failed or lost: the next attempt, or the end; cancelled while running
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.RETRY_WAIT, _S.DEAD_LETTERED,
                           _S.CANCELLED}),
    # ended badly: run once more by hand (scheduler.api.retry_execution)
    _S.FAILED: frozenset({_S.RETRY_WAIT}),
    _S.DEAD_LETTERED: frozenset({_S.RETRY_WAIT}),
    _S.LOST: frozenset({_S.RETRY_WAIT}),
    _S.SUCCEEDED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.SKIPPED: frozenset(),
}

# Not started yet: what a start accepts, and what a cancel ends at once (a running one is asked).
NOT_STARTED = (_S.SCHEDULED, _S.DISPATCHED, _S.RETRY_WAIT)
# Delivered to a worker that may not run it (task unknown, not granted): it ends before a start.
DELIVERED = (_S.SCHEDULED, _S.DISPATCHED)
# Waiting or running: what an overlap policy looks at.
IN_FLIGHT = (_S.SCHEDULED, _S.DISPATCHED, _S.RUNNING, _S.RETRY_WAIT)


def sql_statuses(statuses: Iterable[str]) -> str:
    """``statuses`` as the list of an SQL ``IN (…)``: ``'SCHEDULED', 'DISPATCHED'``."""
    return ", ".join(f"'{status}'" for status in statuses)


# -- a started run --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartedExecution:
    """A run a worker started: its result is written only with this fencing token. Its
    ``scheduled_for`` (the partition key, as the start returned it) goes into every statement
    that follows; None only for a run built without it, whose statements then name the id
    alone."""

    execution_id: str
    fencing_token: int
    attempt: int
    scheduled_for: datetime | None = None


# -- row locks ------------------------------------------------------------------------------

# Rows of chrono_execution locked in one order (by id) before a statement updates several.
LOCK_EXECUTIONS_IN_ORDER = (
    "SELECT execution_id FROM chrono_execution WHERE execution_id = ANY({ids}::uuid[]) "
    "ORDER BY execution_id FOR UPDATE"
)
# The same for rows named by their partition key too: ``{keys}`` is a relation of
# ``(execution_id, scheduled_for)`` pairs (a CTE's name), ``{first}`` and ``{last}`` the bounds of
# its ``scheduled_for`` (see "Partition key" above).
#
# Each row is looked up by its whole primary key, one key after another in id order (a nested
# loop over the sorted keys, each lock taken as its row is found): a join of the keys with the
# table let PostgreSQL read every row of the batch's ``scheduled_for`` range and hash them, and
# the 10,000 instances of a workflow's fan-out share one ``scheduled_for``, so each start or
# finish of a few of them read all 10,000 (54 ms a statement; bench/RESULTS.md, session 23).
LOCK_KEYED_EXECUTIONS_IN_ORDER = (
    "SELECT e.execution_id, e.scheduled_for "
    "FROM (SELECT execution_id, scheduled_for FROM {keys} ORDER BY execution_id) k "
    "CROSS JOIN LATERAL (SELECT c.execution_id, c.scheduled_for FROM chrono_execution c "
    "WHERE c.execution_id = k.execution_id AND c.scheduled_for = k.scheduled_for "
    "AND c.scheduled_for BETWEEN {first}::timestamptz AND {last}::timestamptz "
    "FOR UPDATE) e"
)


def key_range(scheduled_for: Iterable[datetime]) -> tuple[datetime, datetime]:
    """The bound of a batch's ``scheduled_for`` that prunes the days of ``chrono_execution`` a
    statement over the batch cannot touch: from the start of its first row's day to the end of
    its last row's (both included).

    Whole days, not the batch's own first and last fire times: PostgreSQL estimates a range
    condition with constants from the column's statistics, and the rows of a fan-out (or of any
    burst) share one fire time that the statistics have not seen yet. Bounded by that instant,
    the range was estimated at one row, so the planner scanned it for each row of the batch
    instead of looking each row up by its key: a worker's start of 20 of a 10,000-way fan-out's
    executions read 200,000 rows (106-156 ms; 1.1 ms bounded by the day, ``EXPLAIN ANALYZE`` in
    a scratch transaction). A whole day is estimated as what it holds."""
    times = list(scheduled_for)
    first, _ = day_bounds(min(times).astimezone(UTC).date())
    _, after_last = day_bounds(max(times).astimezone(UTC).date())
    return first, after_last - timedelta(microseconds=1)

# -- the reaper's undelivered flag ----------------------------------------------------------

# The reaper flags an execution that waits on a queue nobody consumes with a reason starting so
# (:mod:`reaper.undelivered`), in front of any reason it had (a retry's "lost on …"); its start
# takes the flag off again: it was delivered after all.
UNDELIVERED_REASON_PREFIX = "no consumer on queue "
UNDELIVERED_FLAG_PATTERN = "^no consumer on queue .*? for [0-9.]+ s(; |$)"


def unflagged_reason_sql(column: str) -> str:
    """SQL of ``column`` (an execution's reason) without the reaper's undelivered flag."""
    return (f"CASE WHEN starts_with({column}, '{UNDELIVERED_REASON_PREFIX}') THEN "
            f"regexp_replace({column}, '{UNDELIVERED_FLAG_PATTERN}', '') ELSE {column} END")


# -- the cancel channel ---------------------------------------------------------------------


def cancel_channel(client: RedisClient) -> str:
    """The cancel channel of the deployment ``client`` belongs to (``chrono:db<N>:cancel``)."""
    return announcements.channel_for(announcements.CANCEL, client)


# The audit row of a cancellation, in the statement that makes it (actor as a parameter), over
# ``u``: the updated rows' execution_id, job_id, tenant_id, attempt, reason and finished_at.
CANCELLED_AUDIT = audit.insert_select(
    "u",
    action_name=audit.EXECUTION_CANCELLED,
    actor="%s",
    occurred_at="u.finished_at",
    execution_id="u.execution_id",
    data="jsonb_build_object('attempt', u.attempt, 'reason', u.reason)",
)


def announce_cancel(execution_ids: Sequence[str]) -> None:
    """Tell the workers running ``execution_ids`` to stop them (one message); a worker that
    misses it sees the request at its next lease renewal."""
    if execution_ids:
        client = redis_client()
        announcements.publish(client, cancel_channel(client), "\n".join(execution_ids))
