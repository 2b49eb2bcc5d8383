"""The Python API for applications: schedule one-time and cron jobs, change and cancel them.

Every call is scoped to one tenant. A job's arguments are turned into a job spec and checked by
the one validator of every way in (:mod:`scheduler.specs`, the REST API's too: what one refuses
the other refuses), then written by the one job writer (:mod:`scheduler.job_writer`): its row and
audit row in PostgreSQL, its timer in Redis when the transaction commits (never before: a
rolled-back job leaves no timer behind). Idempotency keys are per tenant: scheduling twice with
one key returns the first job and creates nothing. A change (:func:`update`, which
:func:`reschedule`, :func:`configure` and the REST API's PATCH go through) locks the job once and
checks it against the same rules. :func:`schedule_many` writes many one-time and cron jobs,
each with its own arguments, key and options, by the bulk path's COPY
(:mod:`scheduler.bulk_schedule`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import NamedTuple

from django.db import connection, transaction
from django.utils import timezone as dj_timezone

from chronocore.models import Tenant
from scheduler import calendar_store, job_writer, python_args, specs

# Many jobs in one call, by the bulk path's COPY: part of this API, in a module of its own.
from scheduler.bulk_schedule import ItemError, ScheduledMany, schedule_many  # noqa: F401
from scheduler.cancellation import request_cancel_running
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.errors import (
    ExecutionNotRetryable,
    InvalidJob,
    JobEnded,
    JobNotFound,
    SpecInvalid,
)
from scheduler.executions import cancel_pending_executions
from scheduler.intervals import IntervalSchedule
from scheduler.job_writer import add_timer_on_commit as _add_timer_on_commit
from scheduler.lifecycle import retry_timer_id
from scheduler.misfire import (
    MisfirePolicy,
    MisfireRule,
    jittered_ms,
    jittered_occurrence_ms,
    plan_occurrences,
)
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus, OverlapPolicy
from scheduler.occurrences import record_misfires
from scheduler.prepared import array
from scheduler.retry import RetryPolicy
from scheduler.timers import timer_store
from search import audit

TenantRef = Tenant | uuid.UUID | str


def _tenant_id(tenant: TenantRef) -> uuid.UUID:
    if isinstance(tenant, Tenant):
        return tenant.tenant_id
    try:
        return uuid.UUID(str(tenant))
    except ValueError:
        raise InvalidJob(f"tenant {tenant!r} is not a tenant id", field="tenant") from None


def schedule_once(
    task_name: str,
    *,
    tenant: TenantRef,
    args: list | tuple = (),
    kwargs: Mapping | None = None,
    delay: timedelta | float | None = None,
    at: datetime | None = None,
    queue: str | None = None,
    name: str = "",
    idempotency_key: str | None = None,
    max_retries: int | None = None,
    retry: RetryPolicy | None = None,
    soft_timeout_ms: int | None = None,
    hard_timeout_ms: int | None = None,
    misfire: MisfireRule | MisfirePolicy | str | None = None,
    by: str = "",
) -> Job:
    """Run ``task_name`` once, ``delay`` (seconds or timedelta) from now or ``at`` an aware
    datetime (at most the REST API's ``run_at`` grace in the past).

    ``retry`` is the backoff between attempts, and its ``max_attempts`` how many there are
    (``max_retries``, its old spelling ``max_attempts`` − 1, is deprecated: both given must
    agree); the timeouts are enforced by the worker (soft: ``SoftTimeLimitExceeded`` in the
    task; hard: the process is killed and the attempt is lost, then retried). ``misfire``
    decides whether the job still runs when it is dispatched more than the beat's misfire grace
    late (``skip``: it does not; default: it runs once). Every argument is held to the rules of
    the REST API (:mod:`scheduler.specs`): a spec one refuses, the other refuses, with
    :class:`InvalidJob` naming the argument (PayloadTooLarge for the payload limit)."""
    tenant_id = _tenant_id(tenant)
    options = python_args.execution_options(max_retries, retry, soft_timeout_ms,
                                            hard_timeout_ms, misfire)
    item = {"job_type": task_name, "name": name, **python_args.payload(args, kwargs),
            **python_args.when(delay, at), **options}
    return _created(tenant_id, item, queue=queue, idempotency_key=idempotency_key, by=by)


def schedule_cron(
    task_name: str,
    *,
    tenant: TenantRef,
    cron: str,
    timezone: str = "UTC",
    args: list | tuple = (),
    kwargs: Mapping | None = None,
    queue: str | None = None,
    name: str = "",
    idempotency_key: str | None = None,
    max_retries: int | None = None,
    misfire: MisfireRule | MisfirePolicy | str | None = None,
    jitter_ms: int = 0,
    overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
    retry: RetryPolicy | None = None,
    soft_timeout_ms: int | None = None,
    hard_timeout_ms: int | None = None,
    calendars: Sequence[str] = (),
    by: str = "",
) -> Job:
    """Run ``task_name`` on the cron schedule ``cron`` evaluated in ``timezone``.

    ``calendars`` names the tenant's exclusion calendars (:mod:`scheduler.calendars`): an
    occurrence on a day one of them excludes is skipped, recorded ``SKIPPED`` with the reason
    ``calendar <name>``.

    ``misfire`` says what happens to occurrences missed while nothing dispatched (default: the
    latest missed one fires once); ``jitter_ms`` spreads each occurrence over ``[0, jitter_ms)``
    deterministically, for top-of-the-hour herds. It must stay below the schedule's period.
    The other arguments are :func:`schedule_once`'s; a bad cron expression or time zone raises
    :class:`~scheduler.errors.InvalidSchedule` naming what to change.
    """
    tenant_id = _tenant_id(tenant)
    options = python_args.execution_options(max_retries, retry, soft_timeout_ms,
                                            hard_timeout_ms, misfire)
    item = {"job_type": task_name, "name": name, "cron_expression": cron, "timezone": timezone,
            **python_args.payload(args, kwargs), "jitter_ms": jitter_ms, "overlap_policy": overlap,
            **options, **python_args.calendars(calendars)}
    return _created(tenant_id, item, queue=queue, idempotency_key=idempotency_key, by=by)


def schedule_interval(
    task_name: str,
    *,
    tenant: TenantRef,
    every: timedelta | float,
    anchor: datetime | None = None,
    timezone: str = "UTC",
    args: list | tuple = (),
    kwargs: Mapping | None = None,
    queue: str | None = None,
    name: str = "",
    idempotency_key: str | None = None,
    misfire: MisfireRule | MisfirePolicy | str | None = None,
    jitter_ms: int = 0,
    overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
    retry: RetryPolicy | None = None,
    soft_timeout_ms: int | None = None,
    hard_timeout_ms: int | None = None,
    calendars: Sequence[str] = (),
    by: str = "",
) -> Job:
    """Run ``task_name`` every ``every`` (a timedelta or seconds, at least a second) of elapsed
    time from ``anchor`` (an aware datetime; default now, so the first run is one period from
    now): :mod:`scheduler.intervals`. Daylight saving does not change the period; ``timezone``
    is only the zone the job's times are shown in. Misfire, jitter, overlap, retries and
    calendars are :func:`schedule_cron`'s."""
    item = {"job_type": task_name, "name": name,
            "interval_ms": python_args.interval_ms_of(every), "timezone": timezone,
            **python_args.payload(args, kwargs), "jitter_ms": jitter_ms,
            "overlap_policy": overlap, **python_args.execution_options(
                None, retry, soft_timeout_ms, hard_timeout_ms, misfire),
            **python_args.calendars(calendars)}
    if anchor is not None:
        item["interval_anchor"] = anchor
    return _created(_tenant_id(tenant), item, queue=queue, idempotency_key=idempotency_key,
                    by=by)


def _created(tenant_id: uuid.UUID, item: dict[str, object], *, queue: str | None,
             idempotency_key: str | None, by: str) -> Job:
    """The job ``item`` describes (on ``queue``, or the default one), checked by every rule and
    written by the one writer: what each ``schedule_*`` function ends with."""
    if queue is not None:
        item["queue"] = queue
    spec = _checked(item)
    _check_idempotency_key(idempotency_key)
    return job_writer.create(tenant_id, spec, idempotency_key=idempotency_key, by=by)


def _checked(item: dict[str, object]) -> specs.JobSpec:
    """The spec of ``item`` by every rule (:func:`scheduler.specs.checked_spec`), its first
    problem raised as the Python API's error."""
    try:
        return specs.checked_spec(item, job_writer.current_limits())
    except SpecInvalid as exc:
        raise specs.python_error(exc) from None


def _check_idempotency_key(key: object) -> None:
    if problem := specs.idempotency_key_problem(key):
        raise InvalidJob(specs.python_message("idempotency_key", problem),
                         field="idempotency_key")


def cancel(job_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> bool:
    """Cancel a job: no further occurrence fires, executions not yet started never start, and
    running ones are stopped on their workers. Returns False when there was nothing left to
    cancel. Raises :class:`JobNotFound`."""
    outcome = cancel_many([job_id], tenant=tenant, by=by)
    if outcome.not_found:
        raise JobNotFound(f"no job {job_id} for this tenant")
    return bool(outcome.jobs or outcome.executions)


class CancelledMany(NamedTuple):
    """What :func:`cancel_many` did."""

    jobs: int  # jobs that were ACTIVE or PAUSED and are CANCELLED now
    executions: int  # executions cancelled before they started, or asked to stop running
    not_found: tuple[str, ...]  # ids that name no job of this tenant (another's included)


def cancel_many(job_ids: Sequence[uuid.UUID | str], *, tenant: TenantRef,
                by: str = "") -> CancelledMany:
    """:func:`cancel` of every job of ``job_ids`` in one transaction of three statements, however
    many (a workflow run stopping a 10,000-way fan-out cancels its instances' jobs at once, not
    in 10,000 transactions). Ids that name no job of this tenant are returned, not raised."""
    tenant_id = _tenant_id(tenant)
    ids = list(dict.fromkeys(str(uuid.UUID(str(job_id))) for job_id in job_ids))
    if not ids:
        return CancelledMany(0, 0, ())
    now = dj_timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_CANCEL_JOBS_SQL, [tenant_id, array(ids), now, by, now,
                                              audit.current_actor(by)])
            rows = cursor.fetchall()
        found = [str(job_id) for job_id, _ in rows]
        changed = [str(job_id) for job_id, was_changed in rows if was_changed]
        stopped = 0
        if changed:
            transaction.on_commit(lambda: timer_store().remove(changed))
        if found:  # a one-time job is COMPLETED once dispatched: its execution still stops
            stopped = cancel_pending_executions(found, by=by)
            stopped += len(request_cancel_running(job_ids=found, by=by))
    known = set(found)
    return CancelledMany(len(changed), stopped, tuple(i for i in ids if i not in known))


# The tenant's jobs of the ids, locked in id order (two cancellations of overlapping sets wait
# for each other instead of deadlocking), those still ACTIVE or PAUSED cancelled and audited.
_CANCELLED_AUDIT = audit.insert_select("changed", action_name=audit.JOB_CANCELLED, actor="%s",
                                       occurred_at="changed.cancelled_at")
_CANCEL_JOBS_SQL = f"""
WITH found AS (
  SELECT job_id, status FROM chrono_job
  WHERE tenant_id = %s AND job_id = ANY(%s::uuid[]) ORDER BY job_id FOR UPDATE
), changed AS (
  UPDATE chrono_job j SET status = 'CANCELLED', next_run_at = NULL, cancelled_at = %s,
                          cancelled_by = %s, updated_at = %s
  FROM found f WHERE j.job_id = f.job_id AND f.status IN ('ACTIVE', 'PAUSED')
  RETURNING j.job_id, j.tenant_id, j.cancelled_at
), audited AS ({_CANCELLED_AUDIT})
SELECT f.job_id, c.job_id IS NOT NULL FROM found f LEFT JOIN changed c ON c.job_id = f.job_id
ORDER BY f.job_id
"""  # nosec B608 # built from module constants; every value is a parameter


def _locked_execution(execution_id: uuid.UUID | str, tenant_id: uuid.UUID) -> Execution:
    """The tenant's execution, locked for the caller's transaction; JobNotFound for another
    tenant's id as for an unknown one. By id alone: a caller of the API has nothing else, so
    this look-up probes the primary key of every day's partition (a few index pages a day,
    once per request by a person or a script: not a statement of the hot path). What follows
    names the row by its partition key too (:func:`_save_keyed`)."""
    execution = (Execution.objects.for_tenant(tenant_id).select_for_update()
                 .filter(execution_id=execution_id).first())
    if execution is None:
        raise JobNotFound(f"no execution {execution_id} for this tenant")
    return execution


def cancel_execution(execution_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> str:
    """Cancel one execution: one not started never starts; a running one is stopped on its
    worker within seconds (forced after ``cancel_grace_ms``). Returns ``"cancelled"``,
    ``"stopping"`` or the status it had already finished in."""
    tenant_id = _tenant_id(tenant)
    with transaction.atomic():
        execution = _locked_execution(execution_id, tenant_id)
        if execution.status in (ExecutionStatus.SCHEDULED, ExecutionStatus.DISPATCHED,
                                ExecutionStatus.RETRY_WAIT):
            execution.status, execution.finished_at = ExecutionStatus.CANCELLED, dj_timezone.now()
            execution.reason = f"cancelled by {by or 'unknown'}"
            _save_keyed(execution, ["status", "finished_at", "reason"])
            audit.record(audit.EXECUTION_CANCELLED, tenant_id=tenant_id, job_id=execution.job_id,
                         execution_id=execution.execution_id, actor=by,
                         data={"attempt": execution.attempt, "reason": execution.reason})
            return "cancelled"
        if execution.status == ExecutionStatus.RUNNING:
            request_cancel_running(execution_id=str(execution.execution_id), by=by,
                                   scheduled_for=execution.scheduled_for)
            return "stopping"
        return execution.status.lower()


def _save_keyed(execution: Execution, fields: list[str]) -> None:
    """``execution.save(update_fields=fields)`` by its partition key too: Django's save names
    the primary key alone, which would visit every day's partition."""
    Execution.objects.filter(execution_id=execution.execution_id,
                             scheduled_for=execution.scheduled_for).update(
        **{name: getattr(execution, name) for name in fields})


RETRYABLE_BY_HAND = (ExecutionStatus.FAILED, ExecutionStatus.DEAD_LETTERED, ExecutionStatus.LOST)


def retry_execution(execution_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> int:
    """Run an execution that ended badly (FAILED, DEAD_LETTERED, LOST) once more, as its next
    attempt: RETRY_WAIT now, fired by the beat through a retry timer as soon as it is added
    (the web process publishes nothing itself). Returns the new attempt's number; refuses an
    execution in any other state with :class:`ExecutionNotRetryable`."""
    tenant_id = _tenant_id(tenant)
    with transaction.atomic():
        execution = _locked_execution(execution_id, tenant_id)
        if execution.status not in RETRYABLE_BY_HAND:
            raise ExecutionNotRetryable(
                f"execution {execution_id} is {execution.status}; only a FAILED, DEAD_LETTERED "
                "or LOST execution can be retried")
        now = now_ms()
        execution.attempt += 1
        execution.status, execution.retry_at = ExecutionStatus.RETRY_WAIT, ms_to_datetime(now)
        execution.finished_at = execution.lease_expires_at = None
        execution.reason = f"retried by {by or 'unknown'}"
        execution.fencing_token += 1
        _save_keyed(execution, ["attempt", "status", "retry_at", "finished_at",
                                "lease_expires_at", "reason", "fencing_token"])
        audit.record(audit.EXECUTION_RETRIED, tenant_id=tenant_id, job_id=execution.job_id,
                     execution_id=execution.execution_id, actor=by,
                     data={"attempt": execution.attempt, "reason": execution.reason})
        timer_id = retry_timer_id(str(execution.execution_id), execution.attempt,
                                  datetime_to_ms(execution.scheduled_for))
        transaction.on_commit(lambda: timer_store().add([(timer_id, now)]))
    return execution.attempt


def schedule_once_many(
    task_name: str,
    *,
    tenant: TenantRef,
    fire_times: list[datetime],
    args: list | tuple = (),
    kwargs: Mapping | None = None,
    queue: str | None = None,
    name: str = "",
    by: str = "",
) -> list[Job]:
    """Schedule one one-time job per fire time (aware datetimes) in one transaction, by the
    bulk path's COPY (:func:`scheduler.job_writer.copy`), and their timers in pipelined
    batches. Each fire time is held to the rules of ``at=``."""
    tenant_id = _tenant_id(tenant)
    limits = job_writer.current_limits()
    item = {"job_type": task_name, "name": name, **python_args.payload(args, kwargs),
            "delay_ms": 0}
    if queue is not None:
        item["queue"] = queue
    try:
        template = specs.checked_spec(item, limits)
        jobs = [specs.with_fire_at(template, specs.fire_at_ms(at, limits)) for at in fire_times]
    except SpecInvalid as exc:
        raise specs.python_error(exc) from None
    job_ids = job_writer.copy(tenant_id, jobs, by=by, audit_data={"name": name})
    return [_copied_job(tenant_id, job_id, spec) for job_id, spec in zip(job_ids, jobs,
                                                                           strict=True)]


def _copied_job(tenant_id: uuid.UUID, job_id: str, spec: specs.JobSpec) -> Job:
    """The Job a COPY wrote, as the row reads (but ``created_at``/``updated_at``, the
    database's)."""
    job = Job(job_id=uuid.UUID(job_id), tenant_id=tenant_id,
              next_run_at=ms_to_datetime(spec.fire_at_ms), **job_writer.row_fields(spec))
    job._state.adding, job._state.db = False, "default"
    return job


def _transition(
    job_id: uuid.UUID | str, tenant: TenantRef, *, from_statuses: list[str], **changes: object
) -> Job | None:
    """Apply ``changes`` when the job is in one of ``from_statuses``; the job afterwards, or None
    when it was in another status. Raises :class:`JobNotFound` for an unknown (or foreign) id."""
    tenant_id = _tenant_id(tenant)
    jobs = Job.objects.for_tenant(tenant_id).filter(job_id=job_id)
    changed = jobs.filter(status__in=from_statuses).update(updated_at=dj_timezone.now(), **changes)
    job = jobs.first()
    if job is None:
        raise JobNotFound(f"no job {job_id} for this tenant")
    return job if changed else None


def pause(job_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> bool:
    """Stop firing a job until :func:`resume`; False when it was not ACTIVE."""
    with transaction.atomic():
        job = _transition(job_id, tenant, from_statuses=[JobStatus.ACTIVE],
                          status=JobStatus.PAUSED, paused_at=dj_timezone.now())
        if job is not None:
            audit.record(audit.JOB_PAUSED, tenant_id=job.tenant_id, job_id=job.job_id, actor=by)
            transaction.on_commit(lambda: timer_store().remove([str(job_id)]))
    return job is not None


def resume(job_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> bool:
    """Fire a paused job again. Occurrences that fell due while it was paused follow the job's
    misfire policy with no grace (pausing meant "not now"): ``fire_once`` fires the latest of
    them at once, ``fire_all`` the first ones up to its limit, ``skip`` none; every one not fired
    is recorded as skipped. A one-time job whose time passed fires at once (``skip``: not at all).
    False when it was not PAUSED."""
    with transaction.atomic():
        job = _locked_job(job_id, tenant)
        if job.status != JobStatus.PAUSED:
            return False
        fire_ms = _resume_fire_ms(job, now_ms())
        if fire_ms is None:  # a one-time job whose time passed while paused, policy skip
            job.status, job.next_run_at, job.paused_at = JobStatus.COMPLETED, None, None
            job.save(update_fields=["status", "next_run_at", "paused_at", "updated_at"])
            audit.record(audit.JOB_RESUMED, tenant_id=job.tenant_id, job_id=job.job_id,
                         actor=by, data={"next_run_at": None})
            return True
        job.status, job.next_run_at, job.paused_at = JobStatus.ACTIVE, ms_to_datetime(fire_ms), None
        job.save(update_fields=["status", "next_run_at", "paused_at", "updated_at"])
        audit.record(audit.JOB_RESUMED, tenant_id=job.tenant_id, job_id=job.job_id, actor=by,
                     data={"next_run_at": job.next_run_at})
        _add_timer_on_commit(job)
    return True


def _resume_fire_ms(job: Job, now: int) -> int | None:
    """When a resumed job fires next; records the occurrences missed while paused that will
    not fire. None: nothing left to fire."""
    schedule = specs.stored_schedule(job)
    if schedule is None:
        if job.next_run_at is None:
            return now
        first_ms = datetime_to_ms(job.next_run_at)
    else:
        paused_ms = datetime_to_ms(job.paused_at) if job.paused_at else now
        first_ms = jittered_ms(str(job.job_id), schedule.next_fire_ms(paused_ms), job.jitter_ms)
    if first_ms > now:
        return first_ms
    plan = plan_occurrences(
        schedule=schedule, fire_at_ms=first_ms, now_ms=now, grace_ms=0,
        rule=MisfireRule(MisfirePolicy(job.misfire_policy), job.misfire_fire_all_limit or 1),
    )
    ledger = SimpleNamespace(job_id=str(job.job_id), tenant_id=str(job.tenant_id))
    record_misfires([(ledger, ms, f"{reason}, while paused") for ms, reason in plan.skipped])
    if plan.fire_ms:
        return plan.fire_ms[0]
    if plan.next_ms is None:
        return None
    return jittered_ms(str(job.job_id), plan.next_ms, job.jitter_ms)


def trigger(job_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> bool:
    """Fire an ACTIVE job now, once; a cron job then resumes its schedule after now.
    False when the job is not ACTIVE (resume a paused job first)."""
    with transaction.atomic():
        job = _transition(job_id, tenant, from_statuses=[JobStatus.ACTIVE],
                          next_run_at=ms_to_datetime(now_ms()))
        if job is not None:
            audit.record(audit.JOB_TRIGGERED, tenant_id=job.tenant_id, job_id=job.job_id, actor=by)
            _add_timer_on_commit(job)
    return job is not None


def reschedule(
    job_id: uuid.UUID | str,
    *,
    tenant: TenantRef,
    cron: str | None = None,
    timezone: str | None = None,
    at: datetime | None = None,
    every: timedelta | float | None = None,
    anchor: datetime | None = None,
    by: str = "",
) -> Job:
    """Change when a job fires: a cron job's expression and/or time zone, an interval job's
    period (``every``) and/or ``anchor``, or a one-time job's time (an aware datetime). The
    running beat picks the change up through the timer (no restart). The rules are
    :func:`update`'s."""
    interval_ms = None if every is None else python_args.interval_ms_of(every)
    changes = {key: value for key, value in (("cron_expression", cron), ("timezone", timezone),
                                              ("run_at", at), ("interval_ms", interval_ms),
                                              ("interval_anchor", anchor)) if value is not None}
    return _python_update(job_id, tenant, changes, by)


def configure(
    job_id: uuid.UUID | str,
    *,
    tenant: TenantRef,
    retry: RetryPolicy | None = None,
    timeouts_ms: tuple[int | None, int | None] | None = None,
    overlap: OverlapPolicy | str | None = None,
    misfire: MisfireRule | MisfirePolicy | str | None = None,
    jitter_ms: int | None = None,
    calendars: Sequence[str] | None = None,
    by: str = "",
) -> Job:
    """Change how a job's occurrences run; None leaves a setting as it is. ``retry`` replaces
    the policy; ``timeouts_ms`` is ``(soft, hard)``, None in it meaning no limit. ``overlap``
    and ``jitter_ms`` are for cron jobs; a new jitter moves the pending occurrence within its
    new spread. ``calendars`` replaces the job's exclusion calendars (``[]``: none). The rules
    are :func:`update`'s.

    Occurrences published from now on carry the new settings (the beat reads them from the job
    row when it publishes; attempts already published keep theirs)."""
    changes: dict[str, object] = {}
    if retry is not None:
        changes["retry_policy"] = specs.retry_fields(retry)
    if timeouts_ms is not None:
        changes["soft_timeout_ms"], changes["hard_timeout_ms"] = timeouts_ms
    if overlap is not None:
        changes["overlap_policy"] = overlap
    if misfire is not None:
        changes |= specs.misfire_fields(misfire)
    if jitter_ms is not None:
        changes["jitter_ms"] = jitter_ms
    if calendars is not None:
        changes |= python_args.calendars(calendars, given=True)
    return _python_update(job_id, tenant, changes, by)


def _python_update(job_id: uuid.UUID | str, tenant: TenantRef, changes: dict[str, object],
                   by: str) -> Job:
    try:
        return update(job_id, tenant=tenant, changes=changes, by=by)
    except SpecInvalid as exc:
        raise specs.python_error(exc) from None


def update(job_id: uuid.UUID | str, *, tenant: TenantRef, changes: object, by: str = "") -> Job:
    """Change a job, as ``PATCH /api/v1/jobs/{id}/`` does: ``changes`` in the job's field names
    (the PATCH body as sent: ``run_at``, ``cron_expression``, ``timezone``, the execution
    options). The job is locked and checked once (unknown or another tenant's: JobNotFound,
    before anything is said of the changes), then the changes are checked on their own
    (:func:`scheduler.specs.parse_update`) and against the job as it will be
    (:func:`scheduler.specs.plan_change`); what changed is saved at once with one
    ``job.edited`` audit row, and the timer moves when the transaction commits.

    A new schedule or time fires from its next occurrence after now (spread by the job's
    jitter); a new jitter alone moves the pending occurrence within its new spread. Raises
    :class:`JobNotFound`, :class:`JobEnded` (COMPLETED or CANCELLED), TaskNotGranted (the
    job's grant was removed) and :class:`SpecInvalid` (its ``errors`` per field)."""
    with transaction.atomic():
        job = _locked_job(job_id, tenant, editable=True)
        job_writer.check_granted(job.tenant_id, job.job_type, job.queue)
        limits = job_writer.current_limits()
        parsed = specs.parse_update(changes, limits)
        change = specs.plan_change(job, parsed, now_ms=limits.now_ms)
        changed = _apply_schedule(job, change) + _apply_options(job, change)
        changed += _apply_calendars(job, parsed, change, now=limits.now_ms)
        if not changed:
            return job
        job.save(update_fields=[*changed, "updated_at"])
        audit.record(audit.JOB_EDITED, tenant_id=job.tenant_id, job_id=job.job_id, actor=by,
                     data=audit.job_data(job))
        if "next_run_at" in changed:
            _add_timer_on_commit(job)
    return job


def _apply_schedule(job: Job, change: specs.JobChange) -> list[str]:
    """Set a new schedule or time; returns the fields changed."""
    if isinstance(change.schedule, IntervalSchedule):
        job.interval_ms = change.schedule.period_ms
        job.interval_anchor = ms_to_datetime(change.schedule.anchor_ms)
        job.timezone = change.schedule.timezone
        first_ms = change.schedule.next_fire_ms(now_ms())
        job.jitter_ms = change.options.jitter_ms
        job.next_run_at = ms_to_datetime(jittered_ms(str(job.job_id), first_ms, job.jitter_ms))
        return ["interval_ms", "interval_anchor", "timezone", "next_run_at"]
    if change.schedule is not None:
        job.cron_expression, job.timezone = change.schedule.expression, change.schedule.timezone
        first_ms = change.schedule.next_fire_ms(now_ms())
        job.jitter_ms = change.options.jitter_ms
        job.next_run_at = ms_to_datetime(jittered_ms(str(job.job_id), first_ms, job.jitter_ms))
        return ["cron_expression", "timezone", "next_run_at"]
    if change.fire_at_ms is not None:
        job.next_run_at = ms_to_datetime(change.fire_at_ms)
        return ["next_run_at"]
    return []


def _apply_calendars(job: Job, parsed: Mapping[str, object], change: specs.JobChange, *,
                     now: int) -> list[str]:
    """Set new calendars; check them (and the ones kept, against a new schedule) against the
    tenant's calendars (InvalidJob, field ``calendars``). Returns the fields changed."""
    names = list(parsed.get("calendars", job.calendars))
    if names and ("calendars" in parsed or change.schedule is not None):
        calendar_store.check_job_calendars(job.tenant_id, names, specs.stored_schedule(job),
                                           now_ms=now)
    if names == list(job.calendars):
        return []
    job.calendars = names
    return ["calendars"]


def _apply_options(job: Job, change: specs.JobChange) -> list[str]:
    """Set the options that differ from the job's; returns the fields changed."""
    base, options = change.base, change.options
    changed: list[str] = []
    if (options.retry, options.max_attempts) != (base.retry, base.max_attempts):
        job.retry_policy, job.max_retries = options.retry_policy_row, options.max_retries
        changed += ["retry_policy", "max_retries"]
    if (options.soft_timeout_ms, options.hard_timeout_ms) != (base.soft_timeout_ms,
                                                               base.hard_timeout_ms):
        job.soft_timeout_ms, job.hard_timeout_ms = options.soft_timeout_ms, options.hard_timeout_ms
        changed += ["soft_timeout_ms", "hard_timeout_ms"]
    if options.misfire_rule != base.misfire_rule:
        job.misfire_policy = options.misfire_policy
        job.misfire_fire_all_limit = options.misfire_fire_all_limit
        changed += ["misfire_policy", "misfire_fire_all_limit"]
    if options.overlap_policy != base.overlap_policy:
        job.overlap_policy = options.overlap_policy
        changed.append("overlap_policy")
    if options.jitter_ms != base.jitter_ms:
        changed += ["jitter_ms"] if change.schedule is not None else _rejitter(job,
                                                                               options.jitter_ms)
    return changed


def _locked_job(job_id: uuid.UUID | str, tenant: TenantRef, *, editable: bool = False) -> Job:
    """The tenant's job, locked for the caller's transaction; JobNotFound for another tenant's,
    no job or an id that is not one; JobEnded when ``editable`` and the job has ended."""
    try:
        job_uuid = uuid.UUID(str(job_id))
    except ValueError:
        raise JobNotFound(f"no job {job_id} for this tenant") from None
    job = Job.objects.for_tenant(_tenant_id(tenant)).select_for_update().filter(
        job_id=job_uuid).first()
    if job is None:
        raise JobNotFound(f"no job {job_id} for this tenant")
    if editable and job.status in (JobStatus.COMPLETED, JobStatus.CANCELLED):
        raise JobEnded(f"The job is {job.status}; create a new job instead.", field="status")
    return job


def _rejitter(job: Job, jitter_ms: int) -> list[str]:
    """Set a cron job's jitter; an ACTIVE job's pending occurrence moves within its new spread
    (a paused one gets its jitter when resumed). Returns the fields changed."""
    schedule = specs.stored_schedule(job)
    old_jitter, job.jitter_ms = job.jitter_ms, jitter_ms
    if job.status != JobStatus.ACTIVE or job.next_run_at is None:
        return ["jitter_ms"]
    # The occurrence waiting now is the fire time the old spread delayed into next_run_at.
    occurrence_ms = jittered_occurrence_ms(str(job.job_id), schedule,
                                           datetime_to_ms(job.next_run_at), old_jitter)
    if occurrence_ms is None:
        # Not a regular occurrence (a trigger, an overlap re-check): it keeps its time, and
        # the new spread applies from the next occurrence.
        return ["jitter_ms"]
    job.next_run_at = ms_to_datetime(jittered_ms(str(job.job_id), occurrence_ms, jitter_ms))
    return ["jitter_ms", "next_run_at"]


def delete(job_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> None:
    """Delete a job with its executions, and its timer."""
    with transaction.atomic():
        # Locked first: a beat inserting an execution of this job (it holds the job FOR KEY
        # SHARE) finishes before the executions are collected, so none is left behind
        # (chrono_execution has no foreign key to enforce it; see Execution.job).
        _locked_job(job_id, tenant).delete()
        audit.record(audit.JOB_DELETED, tenant_id=_tenant_id(tenant), job_id=job_id, actor=by)
        transaction.on_commit(lambda: timer_store().remove([str(job_id)]))
