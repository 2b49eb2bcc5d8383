"""The one way a new job is written: row, audit row and timer, for one job or for many.

Every way in validates its spec with :mod:`scheduler.specs` and hands it here: the Python API
(:mod:`scheduler.api`), the REST API's single create and bulk ingest, declared jobs
(``chrono sync-jobs``, ``chrono import-beat``). Here, and only here, a job is checked against
what the spec cannot know (its tenant exists and is active, the tenant was granted the task on
its queue), gets its id and its first fire time (a cron job's spread by its jitter, which
hashes the id), and is written in the caller's transaction with its ``job.created`` audit row;
its timer reaches Redis when that transaction commits (never before: a rolled-back job leaves
no timer behind), announced to the beat when it fires within twice the beat's look-ahead
(:func:`announce_before_ms`, the one place that horizon is computed).

Two modes. :func:`create` writes one row through the ORM and honours an idempotency key (a
second create with the key returns the first job). :func:`copy` writes many with one PostgreSQL
``COPY`` (their audit rows with one ``COPY`` per task name) and their timers in pipelined batches:
the bulk path, 50,000 jobs a second, so it makes no ORM object per job and formats rows as COPY
text itself (:mod:`chronocore.pgcopy`); its per-job work is the id, the fire time and the line.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat

from django.db import IntegrityError, connection, transaction

from chronocore import grants
from chronocore.config import get_config
from chronocore.models import Tenant
from chronocore.pgcopy import NULL, TimestampText, copy_rows, copy_text, escape
from scheduler import calendar_store
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.cron import parse_cron
from scheduler.errors import InvalidJob, TaskNotGranted
from scheduler.misfire import jittered_ms
from scheduler.models import Job, JobStatus
from scheduler.schedules import Schedule, hash_key_of, job_schedule
from scheduler.specs import ExecutionOptions, JobSpec, Limits
from scheduler.timers import timer_store
from search import audit

TIMER_BATCH = 10_000
COPY_CHUNK = 2_000
# The UUID variant bits (10xx) in the 17th hex digit, from any random digit.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
# Columns COPY fills per row, in row order; every other column of the table is a constant.
# The execution options come last, written as one piece (most jobs of a batch share theirs).
_OPTION_COLUMNS = ("max_retries", "retry_policy", "soft_timeout_ms", "hard_timeout_ms",
                   "overlap_policy", "misfire_policy", "misfire_fire_all_limit", "jitter_ms")
_PER_ROW = ("job_id", "name", "job_type", "cron_expression", "timezone", "next_run_at",
            "args", "kwargs", "queue", "interval_ms", "interval_anchor", *_OPTION_COLUMNS)
_PER_REQUEST = ("tenant", "status")  # created_at, updated_at: the database's default (now)


def current_limits() -> Limits:
    """The limits a spec is checked against now (from the config, and the clock)."""
    # The one job writer serves every way in (the Python API an app calls, the REST views, the
    # decorators, sync-jobs): its callers are the process edges, with no owner to hand it a
    # configuration, so it reads the process's here and in announce_before_ms.
    config = get_config()
    return Limits(now_ms=now_ms(), default_queue=config.default_queue,
                  max_payload_bytes=config.max_payload_bytes,
                  run_at_grace_ms=config.run_at_grace_ms)


def announce_before_ms(now: int | None = None) -> int:
    """Timers due before this are announced to their beat when added (it may have read their
    shard's window already): twice the beat's look-ahead from ``now``."""
    return (now_ms() if now is None else now) + get_config().lookahead_ms * 2


def check_tenant_active(tenant_id: uuid.UUID | str) -> None:
    """Raise :class:`InvalidJob` (field ``tenant``) unless the tenant exists and is active."""
    if not Tenant.objects.filter(tenant_id=tenant_id, is_active=True).exists():
        raise InvalidJob(f"tenant {tenant_id} does not exist or is disabled", field="tenant")


def check_granted(tenant_id: uuid.UUID | str, task_name: str, queue: str) -> None:
    """Raise :class:`TaskNotGranted` unless the tenant was granted ``task_name`` on ``queue``."""
    if message := grants.refusal(tenant_id, task_name, queue):
        raise TaskNotGranted(message, task_name=task_name, queue=queue)


def grant_refusal(tenant_id: uuid.UUID | str, spec: JobSpec) -> str | None:
    """Why the tenant may not run ``spec``'s task on its queue; None when it may (the per-item
    check of bulk ingest, which refuses that item alone)."""
    return grants.refusal(tenant_id, spec.job_type, spec.queue)


class ItemChecks:
    """The checks of one bulk write's items beyond the spec's rules, each item refused alone:
    its task's grant on its queue, then its calendars (names the tenant has, and a schedule
    they leave some occurrence). The one per-item check of the REST bulk path and of
    ``api.schedule_many``; each answer is kept for the call (most items share their task,
    queue and calendars), so it costs a dict look-up per item."""

    def __init__(self, tenant_id: uuid.UUID | str) -> None:
        self.tenant_id = tenant_id
        self._grants: dict[tuple[str, str], str | None] = {}
        self._calendars: dict[tuple, str | None] = {}

    def refusal(self, spec: JobSpec) -> tuple[str, str] | None:
        """``(spec field, message)`` of why ``spec`` cannot be written for the tenant (field
        ``job_type`` for the grant, ``calendars`` for its calendars); None when it can."""
        pair = (spec.job_type, spec.queue)
        if pair not in self._grants:
            self._grants[pair] = grant_refusal(self.tenant_id, spec)
        if refused := self._grants[pair]:
            return "job_type", refused
        if spec.calendars:
            key = calendar_key(spec)
            if key not in self._calendars:
                self._calendars[key] = calendar_refusal(self.tenant_id, spec)
            if refused := self._calendars[key]:
                return "calendars", refused
        return None

    def answered(self, spec: JobSpec) -> bool:
        """Whether :meth:`refusal` of ``spec`` is known without a query: these checks answered
        its task and queue (and, when they are granted, its calendars) for an earlier spec."""
        pair = (spec.job_type, spec.queue)
        return pair in self._grants and (self._grants[pair] is not None or not spec.calendars
                                         or calendar_key(spec) in self._calendars)


def row_fields(spec: JobSpec) -> dict[str, object]:
    """The columns a spec sets, as the jobs table holds them (but ``next_run_at``, which waits
    for the job's id when there is jitter)."""
    options = spec.options
    return {
        "job_type": spec.job_type, "name": spec.name, "queue": spec.queue, "args": spec.args,
        "kwargs": spec.kwargs, "cron_expression": spec.cron_expression,
        "timezone": spec.timezone, "interval_ms": spec.interval_ms,
        "interval_anchor": None if spec.anchor_ms is None else ms_to_datetime(spec.anchor_ms),
        "calendars": list(spec.calendars), **option_columns(options),
    }


def option_columns(options: ExecutionOptions) -> dict[str, object]:
    """The execution options' columns (:data:`_OPTION_COLUMNS`, in order)."""
    return {
        "max_retries": options.max_retries, "retry_policy": options.retry_policy_row,
        "soft_timeout_ms": options.soft_timeout_ms, "hard_timeout_ms": options.hard_timeout_ms,
        "overlap_policy": options.overlap_policy, "misfire_policy": options.misfire_policy,
        "misfire_fire_all_limit": options.misfire_fire_all_limit,
        "jitter_ms": options.jitter_ms,
    }


def first_fire_ms(job_id: str, spec: JobSpec) -> int:
    """The first fire time of the job ``spec`` becomes with ``job_id``: its occurrence (for a
    cron with H, hashed from the id: :mod:`scheduler.schedules`) spread by the jitter (the same
    for every computation of it, :func:`scheduler.misfire.jittered_ms`)."""
    fire_ms = spec.fire_at_ms
    if spec.hashed_after_ms is not None:
        schedule = parse_cron(spec.cron_expression, spec.timezone, hash_key_of(job_id))
        fire_ms = schedule.next_fire_ms(spec.hashed_after_ms)
    jitter_ms = spec.options.jitter_ms
    return jittered_ms(job_id, fire_ms, jitter_ms) if jitter_ms else fire_ms


def spec_schedule(job_id: str, spec: JobSpec) -> Schedule | None:
    """The schedule of the job ``spec`` becomes with ``job_id`` (None: a one-time job)."""
    return job_schedule(job_id=job_id, cron_expression=spec.cron_expression,
                        timezone=spec.timezone, interval_ms=spec.interval_ms,
                        anchor_ms=spec.anchor_ms)


def calendar_key(spec: JobSpec) -> tuple:
    """What :func:`calendar_refusal` depends on (specs with equal keys get the same answer; a
    cron with H is checked hashed from one id for all, as its days hardly depend on it)."""
    return (spec.calendars, spec.cron_expression, spec.timezone, spec.interval_ms,
            spec.anchor_ms)


def calendar_refusal(tenant_id: uuid.UUID | str, spec: JobSpec, job_id: str = "") -> str | None:
    """Why ``spec``'s calendars cannot be used by the tenant (a name it has no calendar of, or
    calendars that leave the job no occurrence in five years); None when they can (the
    per-item check of bulk ingest)."""
    if not spec.calendars:
        return None
    try:
        calendar_store.check_job_calendars(tenant_id, spec.calendars,
                                           spec_schedule(job_id or "0", spec), now_ms=now_ms())
    except InvalidJob as exc:
        return exc.message
    return None


# ------------------------------------------------------------------------------------ one job


def create(tenant_id: uuid.UUID | str, spec: JobSpec, *, idempotency_key: str | None = None,
           by: str = "") -> Job:
    """Write the job ``spec`` describes for the tenant, with its audit row, and add its timer
    when the caller's transaction commits. With ``idempotency_key`` (per tenant), a second
    create returns the first job and writes nothing. Raises InvalidJob (tenant) and
    TaskNotGranted."""
    check_tenant_active(tenant_id)
    check_granted(tenant_id, spec.job_type, spec.queue)
    job_id = uuid.uuid4()
    if spec.calendars:
        calendar_store.check_job_calendars(tenant_id, spec.calendars,
                                           spec_schedule(str(job_id), spec), now_ms=now_ms())
    fields = row_fields(spec) | {
        "next_run_at": ms_to_datetime(first_fire_ms(str(job_id), spec))}
    with transaction.atomic():
        try:
            with transaction.atomic():
                job = Job.objects.create(job_id=job_id, tenant_id=tenant_id,
                                         idempotency_key=idempotency_key, **fields)
        except IntegrityError:
            if idempotency_key is None:
                raise
            return Job.objects.get(tenant_id=tenant_id, idempotency_key=idempotency_key)
        audit.record(audit.JOB_CREATED, tenant_id=tenant_id, job_id=job.job_id, actor=by,
                     data=audit.job_data(job))
        add_timer_on_commit(job)
    return job


def add_timer_on_commit(job: Job) -> None:
    """Add (or move) the timer of an ACTIVE job with a next run when the transaction commits."""
    if job.status != JobStatus.ACTIVE or job.next_run_at is None:
        return
    timer = (str(job.job_id), datetime_to_ms(job.next_run_at))
    announce_before = announce_before_ms()
    transaction.on_commit(
        lambda: timer_store().add([timer], announce_before_ms=announce_before))


# ----------------------------------------------------------------------------------- COPY mode


def copy(tenant_id: uuid.UUID | str, specs: Sequence[JobSpec], *, by: str = "",
         audit_data: Mapping[str, object] | None = None) -> list[str]:
    """Write the jobs ``specs`` describe for the tenant with one COPY in the caller's
    transaction (inside one of its own), their ``job.created`` audit rows with one COPY per task
    name (data: the task name and ``audit_data``), and add their timers in pipelined batches
    when it commits. Returns their ids, in order. Raises InvalidJob (tenant) and TaskNotGranted
    (for any spec: a caller that refuses items alone checks :func:`grant_refusal` first)."""
    return copy_keyed(tenant_id, specs, None, by=by, audit_data=audit_data).ids


@dataclass(frozen=True)
class Copied:
    """What :func:`copy_keyed` wrote: an id per spec, in order (the new job's, or the job that
    already had the spec's idempotency key), and the indexes of the specs nothing was written
    for because their key named a job already there (or an earlier spec of the batch)."""

    ids: list[str]
    existing: list[int]


# A COPY that meets a job written meanwhile with one of its keys fails whole (a unique
# violation); it is tried again, the keys looked up anew, this many times in all.
KEYED_COPY_ATTEMPTS = 3


def copy_keyed(tenant_id: uuid.UUID | str, specs: Sequence[JobSpec],
               idempotency_keys: Sequence[str | None] | None, *, by: str = "",
               audit_data: Mapping[str, object] | None = None) -> Copied:
    """:func:`copy`, with an idempotency key (or None) per spec, unique per tenant as in
    :func:`create`: a spec whose key a job of the tenant already has, or an earlier spec of the
    batch, is not written and gets that job's id. The keys are looked up with one statement
    and written in the COPY; a job written with one of them by someone else between the two
    makes the COPY fail whole, and it is tried again (:data:`KEYED_COPY_ATTEMPTS`)."""
    if not specs:
        return Copied([], [])
    check_tenant_active(tenant_id)
    for task_name, queue in {(spec.job_type, spec.queue) for spec in specs}:
        check_granted(tenant_id, task_name, queue)
    # A caller that refuses items alone checks calendar_refusal first; once per distinct
    # schedule and calendars here.
    for spec in {calendar_key(spec): spec for spec in specs if spec.calendars}.values():
        if refused := calendar_refusal(tenant_id, spec):
            raise InvalidJob(refused, field="calendars")
    keys = idempotency_keys if idempotency_keys and any(
        key is not None for key in idempotency_keys) else None
    job_ids = new_job_ids(len(specs))
    if keys is None:
        with transaction.atomic():
            _write_copied(tenant_id, job_ids, specs, None, by, audit_data or {})
        return Copied(job_ids, [])
    for attempt in range(1, KEYED_COPY_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                return _copy_new_keys(tenant_id, job_ids, specs, keys, by, audit_data or {})
        except IntegrityError:
            if attempt == KEYED_COPY_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


def _copy_new_keys(tenant_id: uuid.UUID | str, job_ids: list[str], specs: Sequence[JobSpec],
                   keys: Sequence[str | None], by: str, audit_data: Mapping[str, object]
                   ) -> Copied:
    ids = list(job_ids)
    first_with_key: dict[str, int] = {}
    existing: list[int] = []
    for index, key in enumerate(keys):
        if key is not None:
            first_with_key.setdefault(key, index)
    found = _jobs_with_keys(tenant_id, list(first_with_key))
    written: list[int] = []
    for index, key in enumerate(keys):
        if key is None:
            written.append(index)
        elif key in found:
            ids[index] = found[key]
            existing.append(index)
        elif first_with_key[key] != index:
            ids[index] = job_ids[first_with_key[key]]
            existing.append(index)
        else:
            written.append(index)
    _write_copied(tenant_id, [job_ids[i] for i in written], [specs[i] for i in written],
                  [keys[i] for i in written], by, audit_data)
    return Copied(ids, existing)


@dataclass(frozen=True)
class StreamCopied:
    """What :func:`copy_streamed` did with the specs of all its batches, in order (positions
    count across the batches): an id per spec, None for one its checks refused (as
    :class:`Copied`'s otherwise), the positions of the specs whose key named a job already
    there or an earlier spec, and the refused ones as (position, spec field, message)."""

    ids: list[str | None]
    existing: list[int]
    refused: list[tuple[int, str, str]]


Batch = tuple[Sequence[JobSpec], Sequence[str | None]]


def copy_streamed(tenant_id: uuid.UUID | str, batches: Iterable[Batch], checks: ItemChecks, *,
                  known_keys: Collection[str] = (), by: str = "",
                  audit_data: Mapping[str, object] | None = None) -> StreamCopied:
    """Check each spec of ``batches`` (each a list of specs and a key or None per spec) with
    ``checks``, refusing it alone, and write the others as :func:`copy_keyed` does, in one
    transaction, taking one batch at a time while the jobs' COPY is open: a caller that makes
    each batch as it is asked for (``api.schedule_many`` converts its items a chunk at a time,
    with no query) has that work done while PostgreSQL takes in the rows of the batch before,
    instead of one after the other. The connection cannot run a query while a COPY is open, so
    a batch whose checks may need one (a task, queue or calendars these ``checks`` have not
    answered yet) ends the COPY, is checked, and a new COPY goes on.

    ``known_keys``, every key a spec may hold, is looked up with one statement first; a key
    that was not among them or that someone else wrote meanwhile makes a COPY fail on the
    unique index, and then the rest of the batches are taken and every checked spec written by
    :func:`copy_keyed`, which tries again. Raises InvalidJob (tenant) as :func:`copy` does; a
    spec with a key when ``known_keys`` is empty raises ValueError (no key column)."""
    check_tenant_active(tenant_id)
    batches = iter(batches)
    stream = _Stream(tenant_id, checks, set(known_keys))
    try:
        with transaction.atomic():
            stream.write(batches, by, audit_data or {})
    except IntegrityError:
        if not known_keys:
            raise  # no key to meet: not a race of keys
        stream.take_rest(batches)
        copied = copy_keyed(tenant_id, stream.specs, stream.keys, by=by, audit_data=audit_data)
        return stream.result(copied.ids, copied.existing)
    return stream.result(stream.ids, stream.existing)


class _Stream:
    """The state of one :func:`copy_streamed`: every batch taken and its checks' answers."""

    def __init__(self, tenant_id: uuid.UUID | str, checks: ItemChecks, known_keys: set[str]
                 ) -> None:
        self.tenant_id = tenant_id
        self.checks = checks
        self.known_keys = known_keys
        self.positions: list[int] = []  # of the specs the checks let through
        self.specs: list[JobSpec] = []
        self.keys: list[str | None] = []
        self.refused: list[tuple[int, str, str]] = []
        self.taken = 0  # specs taken, refused ones included
        # What the COPYs wrote, and the id of each spec let through.
        self.ids: list[str] = []
        self.existing: list[int] = []
        self.written_ids: list[str] = []
        self.written_specs: list[JobSpec] = []
        self.timers: list[tuple[str, int]] = []
        self.job_of_key: dict[str, str] = {}
        self.constants = ""

    def write(self, batches: Iterator[Batch], by: str, audit_data: Mapping[str, object]
              ) -> None:
        """The COPYs of every batch, the calendars, the audit rows and the timers on commit."""
        self.job_of_key = _jobs_with_keys(self.tenant_id, list(self.known_keys))
        plan = _copy_plan(bool(self.known_keys))
        self.constants = _constants(self.tenant_id, plan)
        announce_before = announce_before_ms()
        waiting = next(batches, None)
        while waiting is not None:
            first = self.check(*waiting)  # no COPY open: its checks may query
            waiting = None

            def lines(first: Batch = first) -> Iterator[str]:
                nonlocal waiting
                yield from self.lines(*first)
                for specs, keys in batches:
                    if not all(map(self.checks.answered, specs)):
                        waiting = (specs, keys)  # checked once this COPY has ended
                        return
                    yield from self.lines(*self.check(specs, keys))

            copy_rows(plan.sql, lines())
        _set_calendars(self.written_ids, self.written_specs)
        _record_created(self.tenant_id, self.written_ids, self.written_specs, by, audit_data)
        timers = self.timers
        transaction.on_commit(lambda: add_timers(timers, announce_before))

    def check(self, specs: Sequence[JobSpec], keys: Sequence[str | None]) -> Batch:
        """The specs of a batch its checks let through, and their keys (the others refused)."""
        passed: list[JobSpec] = []
        passed_keys: list[str | None] = []
        for spec, key in zip(specs, keys, strict=True):
            if refused := self.checks.refusal(spec):
                self.refused.append((self.taken, *refused))
            else:
                self.positions.append(self.taken)
                passed.append(spec)
                passed_keys.append(key)
            self.taken += 1
        self.specs += passed
        self.keys += passed_keys
        return passed, passed_keys

    def lines(self, specs: Sequence[JobSpec], keys: Sequence[str | None]) -> Iterator[str]:
        """The COPY text of the checked specs of one batch whose key names no job yet."""
        job_ids = new_job_ids(len(specs))
        written: list[int] = []
        for position, (job_id, key) in enumerate(zip(job_ids, keys, strict=True)):
            if key is None:
                written.append(position)
            elif not self.known_keys:
                raise ValueError("a spec has an idempotency key, but known_keys is empty")
            elif (earlier := self.job_of_key.get(key)) is not None:
                self.existing.append(len(self.ids) + position)
                job_ids[position] = earlier
            else:
                self.job_of_key[key] = job_id  # a later spec with the key gets this job
                written.append(position)
        self.ids += job_ids
        ids = [job_ids[i] for i in written]
        if not ids:
            return
        kept = [specs[i] for i in written]
        fire_ms = _fire_times(ids, kept)
        self.written_ids += ids
        self.written_specs += kept
        self.timers += zip(ids, fire_ms, strict=True)
        yield _copy_lines(ids, kept, fire_ms, self.constants if not self.known_keys
                          else _keyed_line_ends([keys[i] for i in written], self.constants))

    def take_rest(self, batches: Iterator[Batch]) -> None:
        """Check every batch not taken yet (after a failed COPY: no COPY is open)."""
        for specs, keys in batches:
            self.check(specs, keys)

    def result(self, ids: list[str], existing: list[int]) -> StreamCopied:
        """The answer, from the ids and existing positions of the specs let through."""
        all_ids: list[str | None] = [None] * self.taken
        for position, job_id in zip(self.positions, ids, strict=True):
            all_ids[position] = job_id
        return StreamCopied(all_ids, [self.positions[i] for i in existing], self.refused)


def _jobs_with_keys(tenant_id: uuid.UUID | str, keys: list[str]) -> dict[str, str]:
    """The tenant's jobs that have one of ``keys``: key -> job id (one statement, one array
    parameter; the unique index on (tenant, key) finds them)."""
    if not keys:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT idempotency_key, job_id::text FROM {Job._meta.db_table} "  # nosec B608 # the model's table name; values are parameters
            "WHERE tenant_id = %s AND idempotency_key = ANY(%s)", [str(tenant_id), keys])
        return dict(cursor.fetchall())


def _write_copied(tenant_id: uuid.UUID | str, job_ids: list[str], specs: Sequence[JobSpec],
                  keys: Sequence[str | None] | None, by: str,
                  audit_data: Mapping[str, object]) -> None:
    """The COPYs of the jobs and their audit rows, and their timers on commit."""
    if not specs:
        return
    fire_ms = _fire_times(job_ids, specs)
    timers = list(zip(job_ids, fire_ms, strict=True))
    announce_before = announce_before_ms()
    _copy_jobs(tenant_id, job_ids, specs, fire_ms, keys)
    _set_calendars(job_ids, specs)
    _record_created(tenant_id, job_ids, specs, by, audit_data)
    transaction.on_commit(lambda: add_timers(timers, announce_before))


def _fire_times(job_ids: list[str], specs: Sequence[JobSpec]) -> list[int]:
    """The first fire time of each job (ms): its spec's, or spread by its id (a jitter, an H)."""
    return [first_fire_ms(job_id, spec)
            if spec.options.jitter_ms or spec.hashed_after_ms is not None else spec.fire_at_ms
            for job_id, spec in zip(job_ids, specs, strict=True)]


def _set_calendars(job_ids: list[str], specs: Sequence[JobSpec]) -> None:
    """The calendars of the copied jobs that name any (the COPY leaves the column to its
    default, empty: most jobs have none, and an array per line would cost every line): one
    UPDATE per distinct list."""
    by_names: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for job_id, spec in zip(job_ids, specs, strict=True):
        if spec.calendars:
            by_names[spec.calendars].append(job_id)
    with connection.cursor() as cursor:
        for names, ids in by_names.items():
            cursor.execute(
                f"UPDATE {Job._meta.db_table} SET calendars = %s "  # nosec B608 # the model's table name; values are parameters
                "WHERE job_id = ANY(%s::uuid[])", [list(names), ids])


@dataclass(frozen=True)
class _CopyPlan:
    sql: str
    defaults: tuple  # values of the columns after the per-row and per-request ones


@cache
def _copy_plan(keyed: bool = False) -> _CopyPlan:
    """COPY statement for the jobs table (``keyed``: with an idempotency key per row, after the
    options). Columns added to Job later get their model default, so this keeps working when
    the model grows (a column with a db_default, or a generated one, is left to PostgreSQL)."""
    fields = {f.name: f for f in Job._meta.concrete_fields}
    per_row = (*_PER_ROW, "idempotency_key") if keyed else _PER_ROW
    rest = [
        f for name, f in fields.items()
        if name not in per_row and name not in _PER_REQUEST
        and not f.has_db_default() and not getattr(f, "generated", False)
    ]
    defaults = []
    for f in rest:
        value = f.get_default()
        if isinstance(value, list | dict):
            value = json.dumps(value)
        defaults.append(value)
    columns = [fields[n].column for n in (*per_row, *_PER_REQUEST)] + [f.column for f in rest]
    sql = f"COPY {Job._meta.db_table} ({', '.join(columns)}) FROM STDIN"
    return _CopyPlan(sql=sql, defaults=tuple(defaults))


def _copy_jobs(tenant_id: uuid.UUID | str, job_ids: list[str], specs: Sequence[JobSpec],
               fire_ms: list[int], keys: Sequence[str | None] | None = None) -> None:
    """Write the jobs with one COPY on Django's connection (so inside its transaction).

    Rows are formatted as COPY text here rather than by psycopg's ``write_row``: at bulk rates
    that halves the Python time per row. Only ``name`` and the JSON payloads can hold characters
    COPY treats specially; every other column is validated to be free of them.
    """
    plan = _copy_plan(keys is not None)
    constants = _constants(tenant_id, plan)
    line_ends = constants if keys is None else _keyed_line_ends(keys, constants)
    copy_rows(plan.sql, (
        _copy_lines(job_ids[start:start + COPY_CHUNK], specs[start:start + COPY_CHUNK],
                    fire_ms[start:start + COPY_CHUNK],
                    line_ends if keys is None else line_ends[start:start + COPY_CHUNK])
        for start in range(0, len(specs), COPY_CHUNK)
    ))


def _constants(tenant_id: uuid.UUID | str, plan: _CopyPlan) -> str:
    """The COPY text every line of the tenant's jobs ends with (after a key, if any)."""
    return "\t".join([str(tenant_id), JobStatus.ACTIVE.value,
                      *(copy_text(value) for value in plan.defaults)])


def _keyed_line_ends(keys: Sequence[str | None], constants: str) -> list[str]:
    """Each line's end when the rows carry a key: the key goes in front of the constants (its
    column follows the options')."""
    return [f"{NULL if key is None else escape(key)}\t{constants}" for key in keys]


def _copy_lines(job_ids: list[str], specs: Sequence[JobSpec], fire_ms: list[int],
                constants: str | list[str]) -> str:
    """The COPY text of the rows; ``constants`` ends every line, or each line its own (a key
    in front of the constants)."""
    timestamp = TimestampText()
    # Looked up by identity per row (the specs without options share one object,
    # specs.DEFAULT_OPTIONS), formatted once per distinct value.
    by_value: dict[ExecutionOptions, str] = {}
    options_text = {}
    for options in {id(spec.options): spec.options for spec in specs}.values():
        if options not in by_value:
            by_value[options] = _options_text(options)
        options_text[id(options)] = by_value[options]
    line_ends = repeat(constants, len(specs)) if isinstance(constants, str) else constants
    return "".join([
        f"{job_id}\t{escape(spec.name)}\t{spec.job_type}\t{spec.cron_expression or NULL}\t"
        f"{spec.timezone}\t{timestamp(fire)}\t"
        f"{escape(spec.args_json)}\t{escape(spec.kwargs_json)}\t{spec.queue}\t"
        f"{_interval_text(spec, timestamp)}\t{options_text[id(spec.options)]}\t{line_end}\n"
        for job_id, spec, fire, line_end in zip(job_ids, specs, fire_ms, line_ends, strict=True)
    ])


def _interval_text(spec: JobSpec, timestamp: TimestampText) -> str:
    """``interval_ms`` and ``interval_anchor`` as COPY text (nulls for any other job)."""
    if spec.interval_ms is None:
        return f"{NULL}\t{NULL}"
    return f"{spec.interval_ms}\t{timestamp(spec.anchor_ms)}"


def _options_text(options: ExecutionOptions) -> str:
    """The _OPTION_COLUMNS of a row, as COPY text (the values :func:`option_columns` gives)."""
    columns = option_columns(options)
    columns["retry_policy"] = options.retry_policy_json
    return "\t".join(copy_text(columns[name]) for name in _OPTION_COLUMNS)


def _record_created(tenant_id: uuid.UUID | str, job_ids: list[str], specs: Sequence[JobSpec],
                    by: str, audit_data: Mapping[str, object]) -> None:
    """One JOB_CREATED audit row per job, in the COPY's transaction: one COPY per task name
    in the batch (the rows of one COPY share their data)."""
    by_job_type: dict[str, list[str]] = defaultdict(list)
    for job_id, spec in zip(job_ids, specs, strict=True):
        by_job_type[spec.job_type].append(job_id)
    for job_type, ids in by_job_type.items():
        audit.record_jobs(audit.JOB_CREATED, tenant_id=tenant_id, job_ids=ids, actor=by,
                          data={"job_type": job_type, **audit_data})


def new_job_ids(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs as strings, from one ``os.urandom`` call: five times
    faster than ``uuid.uuid4()`` one by one, which matters at 50,000 jobs a second."""
    digits = os.urandom(16 * count).hex()
    ids = []
    for start in range(0, 32 * count, 32):
        h = digits[start:start + 32]
        ids.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}")
    return ids


def add_timers(timers: list[tuple[str, int]], announce_before_ms: int) -> None:
    """Add timers to Redis, one pipelined round trip per ``TIMER_BATCH``."""
    store = timer_store()
    for start in range(0, len(timers), TIMER_BATCH):
        store.add(timers[start:start + TIMER_BATCH], announce_before_ms=announce_before_ms)
