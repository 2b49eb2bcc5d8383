"""The Python API for applications: schedule one-time and cron jobs, cancel them.

Every call is scoped to one tenant. A job is written to PostgreSQL and its timer reaches Redis when
the transaction commits (never before: a rolled-back job leaves no timer behind). Idempotency keys
are per tenant: scheduling twice with one key returns the first job and creates nothing.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from functools import cache
from types import SimpleNamespace

from django.db import IntegrityError, transaction
from django.utils import timezone as dj_timezone

from chronocore import grants
from chronocore.config import get_config
from chronocore.models import Tenant
from chronocore.redis_client import redis_client
from scheduler.attempts import RETRY_TIMER_SEPARATOR
from scheduler.cancellation import request_cancel_running
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.cron import CronSchedule, parse_cron, validate_timezone
from scheduler.errors import (
    ExecutionNotRetryable,
    InvalidJob,
    JobNotFound,
    PayloadTooLarge,
    TaskNotGranted,
)
from scheduler.executions import cancel_pending_executions
from scheduler.inputs import control_character_problem, encode_payload
from scheduler.misfire import (
    MisfirePolicy,
    MisfireRule,
    jitter_room_ms,
    jittered_ms,
    jittered_occurrence_ms,
    plan_occurrences,
)
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus, OverlapPolicy
from scheduler.occurrences import record_misfires
from scheduler.retry import RetryPolicy
from scheduler.timers import TimerStore
from search import audit

TenantRef = Tenant | uuid.UUID | str


@cache
def timer_store() -> TimerStore:
    """This process's timer store (one Redis connection pool)."""
    return TimerStore(redis_client(), shard_count=get_config().shard_count)


def _tenant_id(tenant: TenantRef) -> uuid.UUID:
    if isinstance(tenant, Tenant):
        return tenant.tenant_id
    try:
        return uuid.UUID(str(tenant))
    except ValueError:
        raise InvalidJob(f"tenant {tenant!r} is not a tenant id", field="tenant") from None


def _check_text(**arguments: object) -> None:
    """Refuse a text argument holding a control character (InvalidJob naming the argument),
    as the REST API refuses such a field."""
    for name, value in arguments.items():
        if isinstance(value, str) and (problem := control_character_problem(value)):
            raise InvalidJob(f"{name} {problem[0].lower()}{problem[1:]}", field=name)


def _json_payload(args: object, kwargs: object) -> tuple[list, dict]:
    """``args`` and ``kwargs`` as the jobs table will hold them (JSON: tuples become lists, keys
    strings), checked as the REST API checks them (:func:`scheduler.inputs.encode_payload`).
    Raises InvalidJob naming ``args`` or ``kwargs``, PayloadTooLarge over the limit."""
    values = []
    for name, value, kind in (("args", args, list), ("kwargs", kwargs, dict)):
        try:
            values.append(json.loads(json.dumps(kind(value), allow_nan=False)))
        except (TypeError, ValueError) as exc:
            raise InvalidJob(f"{name} must be JSON-serialisable: {exc}", field=name) from None
    payload = encode_payload(*values, max_bytes=get_config().max_payload_bytes)
    if payload.too_large:  # its message comes last
        raise PayloadTooLarge(payload.errors["args"][-1], field="args")
    for name, messages in payload.errors.items():
        raise InvalidJob(messages[0], field=name)
    return values[0], values[1]


def check_granted(tenant_id: uuid.UUID | str, task_name: str, queue: str) -> None:
    """Raise :class:`TaskNotGranted` unless the tenant was granted ``task_name`` on ``queue``."""
    if message := grants.refusal(tenant_id, task_name, queue):
        raise TaskNotGranted(message, task_name=task_name, queue=queue)


def _one_time_fire_ms(delay: timedelta | float | None, at: datetime | None) -> int:
    if (delay is None) == (at is None):
        raise InvalidJob("give exactly one of delay= or at=", field="delay")
    if at is not None:
        if dj_timezone.is_naive(at):
            raise InvalidJob(
                "at= is a naive datetime; pass an aware one (e.g. with tzinfo=UTC)", field="at"
            )
        return datetime_to_ms(at)
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if seconds < 0:
        raise InvalidJob(f"delay= is negative ({seconds} s); use 0 or more", field="delay")
    return now_ms() + round(seconds * 1000)


def _create(tenant: TenantRef, idempotency_key: str | None, by: str = "", **fields: object) -> Job:
    tenant_id = _tenant_id(tenant)
    _check_text(task_name=fields["job_type"], name=fields["name"], queue=fields["queue"],
                idempotency_key=idempotency_key)
    if not Tenant.objects.filter(tenant_id=tenant_id, is_active=True).exists():
        raise InvalidJob(f"tenant {tenant_id} does not exist or is disabled", field="tenant")
    check_granted(tenant_id, fields["job_type"], fields["queue"])
    fields["args"], fields["kwargs"] = _json_payload(fields.get("args") or [],
                                                     fields.get("kwargs") or {})
    with transaction.atomic():
        try:
            with transaction.atomic():
                job = Job.objects.create(
                    tenant_id=tenant_id, idempotency_key=idempotency_key, **fields
                )
        except IntegrityError:
            if idempotency_key is None:
                raise
            return Job.objects.get(tenant_id=tenant_id, idempotency_key=idempotency_key)
        audit.record(audit.JOB_CREATED, tenant_id=tenant_id, job_id=job.job_id, actor=by,
                     data=audit.job_data(job))
        _add_timer_on_commit(job)
    return job


def _add_timer_on_commit(job: Job) -> None:
    if job.status != JobStatus.ACTIVE or job.next_run_at is None:
        return
    timer = (str(job.job_id), datetime_to_ms(job.next_run_at))
    announce_before = now_ms() + get_config().lookahead_ms * 2
    transaction.on_commit(
        lambda: timer_store().add([timer], announce_before_ms=announce_before)
    )


def schedule_once(
    task_name: str,
    *,
    tenant: TenantRef,
    args: list | tuple = (),
    kwargs: dict | None = None,
    delay: timedelta | float | None = None,
    at: datetime | None = None,
    queue: str | None = None,
    name: str = "",
    idempotency_key: str | None = None,
    max_retries: int = 0,
    retry: RetryPolicy | None = None,
    soft_timeout_ms: int | None = None,
    hard_timeout_ms: int | None = None,
    misfire: MisfireRule | None = None,
    by: str = "",
) -> Job:
    """Run ``task_name`` once, ``delay`` (seconds or timedelta) from now or ``at`` a time.

    ``retry`` is the backoff between attempts (its ``max_attempts``, when given, wins over
    ``max_retries``); the timeouts are enforced by the worker (soft: ``SoftTimeLimitExceeded``
    in the task; hard: the process is killed and the attempt is lost, then retried).
    ``misfire`` decides whether the job still runs when it is dispatched more than the beat's
    misfire grace late (``skip``: it does not; default: it runs once)."""
    fire_ms = _one_time_fire_ms(delay, at)
    misfire = misfire or MisfireRule()
    return _create(
        tenant,
        idempotency_key,
        by,
        job_type=task_name,
        name=name,
        args=args,
        kwargs=kwargs,
        queue=queue or get_config().default_queue,
        next_run_at=ms_to_datetime(fire_ms),
        misfire_policy=misfire.policy.value,
        misfire_fire_all_limit=misfire.fire_all_limit,
        **_execution_options(max_retries, retry, soft_timeout_ms, hard_timeout_ms),
    )


def schedule_cron(
    task_name: str,
    *,
    tenant: TenantRef,
    cron: str,
    timezone: str = "UTC",
    args: list | tuple = (),
    kwargs: dict | None = None,
    queue: str | None = None,
    name: str = "",
    idempotency_key: str | None = None,
    max_retries: int = 0,
    misfire: MisfireRule | None = None,
    jitter_ms: int = 0,
    overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
    retry: RetryPolicy | None = None,
    soft_timeout_ms: int | None = None,
    hard_timeout_ms: int | None = None,
    by: str = "",
) -> Job:
    """Run ``task_name`` on the cron schedule ``cron`` evaluated in ``timezone``.

    ``misfire`` says what happens to occurrences missed while nothing dispatched (default: the
    latest missed one fires once); ``jitter_ms`` spreads each occurrence over ``[0, jitter_ms)``
    deterministically, for top-of-the-hour herds. It must stay below the schedule's period.
    """
    _check_text(cron=cron, timezone=timezone)
    validate_timezone(timezone)
    schedule = parse_cron(cron, timezone)
    misfire = misfire or MisfireRule()
    check_jitter(jitter_ms, schedule)
    first_ms = schedule.next_fire_ms(now_ms())
    job_id = uuid.uuid4()
    return _create(
        tenant,
        idempotency_key,
        by,
        job_type=task_name,
        name=name,
        args=args,
        kwargs=kwargs,
        queue=queue or get_config().default_queue,
        job_id=job_id,
        cron_expression=schedule.expression,
        timezone=timezone,
        misfire_policy=misfire.policy.value,
        misfire_fire_all_limit=misfire.fire_all_limit,
        jitter_ms=jitter_ms,
        overlap_policy=_overlap(overlap),
        next_run_at=ms_to_datetime(jittered_ms(str(job_id), first_ms, jitter_ms)),
        **_execution_options(max_retries, retry, soft_timeout_ms, hard_timeout_ms),
    )


def _execution_options(
    max_retries: int,
    retry: RetryPolicy | None,
    soft_timeout_ms: int | None,
    hard_timeout_ms: int | None,
) -> dict[str, object]:
    if max_retries < 0:
        raise InvalidJob(f"max_retries is negative ({max_retries}); use 0 or more",
                         field="max_retries")
    for exception_name in retry.non_retryable if retry is not None else ():
        try:
            _check_text(non_retryable=exception_name)
        except InvalidJob as exc:
            raise InvalidJob(exc.message, field="retry") from None
    _check_timeouts(soft_timeout_ms, hard_timeout_ms)
    policy = retry.to_json() if retry is not None else {}
    if retry is not None:
        max_retries = retry.max_attempts - 1
    return {"max_retries": max_retries, "retry_policy": policy,
            "soft_timeout_ms": soft_timeout_ms, "hard_timeout_ms": hard_timeout_ms}


def _check_timeouts(soft_timeout_ms: int | None, hard_timeout_ms: int | None) -> None:
    for name, value in (("soft_timeout_ms", soft_timeout_ms), ("hard_timeout_ms", hard_timeout_ms)):
        if value is not None and value < 1:
            raise InvalidJob(f"{name} must be a positive number of ms, got {value}", field=name)
    if soft_timeout_ms and hard_timeout_ms and soft_timeout_ms >= hard_timeout_ms:
        raise InvalidJob("soft_timeout_ms must be below hard_timeout_ms, so the task is warned "
                         "before it is killed", field="soft_timeout_ms")


def _overlap(value: OverlapPolicy | str) -> str:
    try:
        return OverlapPolicy(value).value
    except ValueError:
        choices = ", ".join(p.value for p in OverlapPolicy)
        raise InvalidJob(f"overlap {value!r} is not one of {choices}", field="overlap") from None


def check_jitter(jitter_ms: int, schedule: CronSchedule) -> None:
    """Refuse a jitter that is negative or not below the gap between the schedule's coming
    occurrences (:func:`scheduler.misfire.jitter_room_ms`, the rule of the REST API too)."""
    if jitter_ms < 0:
        raise InvalidJob(f"jitter_ms is negative ({jitter_ms}); use 0 or more", field="jitter_ms")
    if jitter_ms and jitter_ms >= (room_ms := jitter_room_ms(schedule, now_ms())):
        raise InvalidJob(
            f"jitter_ms {jitter_ms} is not below the schedule's period ({room_ms} ms between "
            "its coming occurrences); a smaller spread keeps occurrences in order",
            field="jitter_ms",
        )


def cancel(job_id: uuid.UUID | str, *, tenant: TenantRef, by: str = "") -> bool:
    """Cancel a job: no further occurrence fires, executions not yet started never start, and
    running ones are stopped on their workers. Returns False when there was nothing left to
    cancel. Raises :class:`JobNotFound`."""
    tenant_id = _tenant_id(tenant)
    with transaction.atomic():
        jobs = Job.objects.for_tenant(tenant_id).filter(job_id=job_id)
        if not jobs.exists():
            raise JobNotFound(f"no job {job_id} for this tenant")
        changed = jobs.filter(status__in=[JobStatus.ACTIVE, JobStatus.PAUSED]).update(
            status=JobStatus.CANCELLED,
            next_run_at=None,
            cancelled_at=dj_timezone.now(),
            cancelled_by=by,
            updated_at=dj_timezone.now(),
        )
        if changed:
            audit.record(audit.JOB_CANCELLED, tenant_id=tenant_id, job_id=job_id, actor=by)
            transaction.on_commit(lambda: timer_store().remove([str(job_id)]))
        # A one-time job is COMPLETED once dispatched: its queued or running execution is
        # still cancelled here.
        stopped = cancel_pending_executions(job_id, by=by)
        stopped += len(request_cancel_running(job_id=job_id, by=by))
    return bool(changed or stopped)


def _locked_execution(execution_id: uuid.UUID | str, tenant_id: uuid.UUID) -> Execution:
    """The tenant's execution, locked for the caller's transaction; JobNotFound for another
    tenant's id as for an unknown one."""
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
            execution.save(update_fields=["status", "finished_at", "reason"])
            audit.record(audit.EXECUTION_CANCELLED, tenant_id=tenant_id, job_id=execution.job_id,
                         execution_id=execution.execution_id, actor=by,
                         data={"attempt": execution.attempt, "reason": execution.reason})
            return "cancelled"
        if execution.status == ExecutionStatus.RUNNING:
            request_cancel_running(execution_id=str(execution_id), by=by)
            return "stopping"
        return execution.status.lower()


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
        execution.save(update_fields=["attempt", "status", "retry_at", "finished_at",
                                      "lease_expires_at", "reason", "fencing_token"])
        audit.record(audit.EXECUTION_RETRIED, tenant_id=tenant_id, job_id=execution.job_id,
                     execution_id=execution.execution_id, actor=by,
                     data={"attempt": execution.attempt, "reason": execution.reason})
        timer_id = f"{execution.execution_id}{RETRY_TIMER_SEPARATOR}{execution.attempt}"
        transaction.on_commit(lambda: timer_store().add([(timer_id, now)]))
    return execution.attempt


def schedule_once_many(
    task_name: str,
    *,
    tenant: TenantRef,
    fire_times: list[datetime],
    args: list | tuple = (),
    kwargs: dict | None = None,
    queue: str | None = None,
    name: str = "",
    by: str = "",
) -> list[Job]:
    """Schedule one one-time job per fire time in one transaction and one Redis round trip."""
    tenant_id = _tenant_id(tenant)
    _check_text(task_name=task_name, name=name, queue=queue)
    queue = queue or get_config().default_queue
    check_granted(tenant_id, task_name, queue)
    args, kwargs = _json_payload(args, kwargs or {})
    for at in fire_times:
        if dj_timezone.is_naive(at):
            raise InvalidJob("fire_times holds a naive datetime; pass aware ones", field="at")
    jobs = [
        Job(
            tenant_id=tenant_id,
            job_type=task_name,
            name=name,
            args=args,
            kwargs=kwargs,
            queue=queue,
            next_run_at=ms_to_datetime(datetime_to_ms(at)),
        )
        for at in fire_times
    ]
    timers = [(str(job.job_id), datetime_to_ms(job.next_run_at)) for job in jobs]
    announce_before = now_ms() + get_config().lookahead_ms * 2
    with transaction.atomic():
        Job.objects.bulk_create(jobs, batch_size=2_000)
        audit.record_jobs(audit.JOB_CREATED, tenant_id=tenant_id, job_ids=[j.job_id for j in jobs],
                          actor=by, data={"job_type": task_name, "name": name})
        transaction.on_commit(
            lambda: timer_store().add(timers, announce_before_ms=announce_before)
        )
    return jobs


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
    schedule = parse_cron(job.cron_expression, job.timezone) if job.cron_expression else None
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
    by: str = "",
) -> Job:
    """Change when a job fires: a cron job's expression and/or time zone, or a one-time job's
    time. The running beat picks the change up through the timer (no restart)."""
    _check_text(cron=cron, timezone=timezone)
    with transaction.atomic():
        job = _locked_job(job_id, tenant, editable=True)
        check_granted(job.tenant_id, job.job_type, job.queue)
        if job.cron_expression:
            if at is not None:
                raise InvalidJob("at= is for one-time jobs; pass cron= or timezone=", field="at")
            tz = timezone or job.timezone
            validate_timezone(tz)
            schedule = parse_cron(cron or job.cron_expression, tz)
            job.cron_expression, job.timezone = schedule.expression, tz
            fire_ms = jittered_ms(str(job.job_id), schedule.next_fire_ms(now_ms()), job.jitter_ms)
        else:
            if cron is not None or timezone is not None:
                raise InvalidJob("cron= and timezone= are for cron jobs; pass at=", field="cron")
            fire_ms = _one_time_fire_ms(None, at)
        job.next_run_at = ms_to_datetime(fire_ms)
        job.save(update_fields=["cron_expression", "timezone", "next_run_at", "updated_at"])
        audit.record(audit.JOB_EDITED, tenant_id=job.tenant_id, job_id=job.job_id, actor=by,
                     data=audit.job_data(job))
        if job.status == JobStatus.ACTIVE:
            _add_timer_on_commit(job)
    return job


def _locked_job(job_id: uuid.UUID | str, tenant: TenantRef, *, editable: bool = False) -> Job:
    """The tenant's job, locked for the caller's transaction; JobNotFound for another tenant's
    or no job, InvalidJob when ``editable`` and the job has ended."""
    job = Job.objects.for_tenant(_tenant_id(tenant)).select_for_update().filter(
        job_id=job_id).first()
    if job is None:
        raise JobNotFound(f"no job {job_id} for this tenant")
    if editable and job.status in (JobStatus.COMPLETED, JobStatus.CANCELLED):
        raise InvalidJob(f"job is {job.status}; create a new job instead", field="status")
    return job


def configure(
    job_id: uuid.UUID | str,
    *,
    tenant: TenantRef,
    retry: RetryPolicy | None = None,
    timeouts_ms: tuple[int | None, int | None] | None = None,
    overlap: OverlapPolicy | str | None = None,
    misfire: MisfireRule | None = None,
    jitter_ms: int | None = None,
    by: str = "",
) -> Job:
    """Change how a job's occurrences run; None leaves a setting as it is. ``retry`` replaces
    the policy (``max_retries`` follows its ``max_attempts``); ``timeouts_ms`` is ``(soft,
    hard)``, None in it meaning no limit. ``overlap`` and ``jitter_ms`` are for cron jobs; a
    new jitter moves the pending occurrence within its new spread.

    Occurrences published from now on carry the new settings (the beat reads them from the job
    row when it publishes; attempts already published keep theirs)."""
    with transaction.atomic():
        job = _locked_job(job_id, tenant, editable=True)
        check_granted(job.tenant_id, job.job_type, job.queue)
        changed: list[str] = []
        if retry is not None:
            job.retry_policy, job.max_retries = retry.to_json(), retry.max_attempts - 1
            changed += ["retry_policy", "max_retries"]
        if timeouts_ms is not None:
            _check_timeouts(*timeouts_ms)
            job.soft_timeout_ms, job.hard_timeout_ms = timeouts_ms
            changed += ["soft_timeout_ms", "hard_timeout_ms"]
        if misfire is not None:
            job.misfire_policy = misfire.policy.value
            job.misfire_fire_all_limit = misfire.fire_all_limit
            changed += ["misfire_policy", "misfire_fire_all_limit"]
        if overlap is not None:
            _cron_only(job, "overlap")
            job.overlap_policy = _overlap(overlap)
            changed.append("overlap_policy")
        if jitter_ms is not None and jitter_ms != job.jitter_ms:
            _cron_only(job, "jitter_ms")
            changed += _rejitter(job, jitter_ms)
        job.save(update_fields=[*changed, "updated_at"])
        audit.record(audit.JOB_EDITED, tenant_id=job.tenant_id, job_id=job.job_id, actor=by,
                     data=audit.job_data(job))
        if "next_run_at" in changed:
            _add_timer_on_commit(job)
    return job


def _cron_only(job: Job, name: str) -> None:
    if not job.cron_expression:
        raise InvalidJob(f"{name} is for cron jobs; this job runs once", field=name)


def _rejitter(job: Job, jitter_ms: int) -> list[str]:
    """Set a cron job's jitter; an ACTIVE job's pending occurrence moves within its new spread
    (a paused one gets its jitter when resumed). Returns the fields changed."""
    schedule = parse_cron(job.cron_expression, job.timezone)
    check_jitter(jitter_ms, schedule)
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
