"""Cron and interval jobs declared in code, by ``@chrono_job`` or by a Celery ``beat_schedule``,
kept in step with the jobs table: one Chrono job per declaration, found again by its idempotency
key. An interval declared without an anchor keeps the anchor its job got when it was created (so
a second sync moves nothing); a declaration that turns a cron job into an interval job (an entry
``chrono import-beat`` used to translate to cron) or back converts the job in place.

Syncing a declaration creates its job the first time (:func:`scheduler.job_writer.create`), leaves
it alone when nothing changed, and otherwise updates it in place and re-times it
(:func:`scheduler.api.reschedule`, which also writes the ``job.edited`` audit row and re-adds the
timer). So running ``chrono sync-jobs`` or ``chrono import-beat`` after every deploy is safe: a
second run creates nothing. A job an operator cancelled stays cancelled: its key is kept with it,
and syncing reports it instead of creating it again behind the operator's back. A job an operator
paused stays paused, with its declaration updated.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from django.db import transaction

from chronocore.models import Tenant
from scheduler import api, calendar_store, job_writer, python_args, specs
from scheduler.clock import now_ms
from scheduler.errors import InvalidJob, SpecInvalid
from scheduler.misfire import MisfireRule
from scheduler.models import Job, JobStatus
from scheduler.retry import RetryPolicy

IDEMPOTENCY_KEY_MAX_CHARS = 200  # Job.idempotency_key's max_length
# The fields a declaration owns; anything else on the job (status, history) is the operator's.
DECLARED_FIELDS = (
    "job_type",
    "name",
    "cron_expression",
    "interval_ms",
    "timezone",
    "queue",
    "args",
    "kwargs",
    "misfire_policy",
    "misfire_fire_all_limit",
    "jitter_ms",
    "overlap_policy",
    "retry_policy",
    "max_retries",
    "calendars",
)


class SyncOutcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, kw_only=True)
class CronJobSpec:
    """A cron job as code declares it. Validated at construction by the rules of every way in
    (:mod:`scheduler.specs`: cron, time zone, jitter, task and queue names, arguments, policies),
    so a bad declaration fails where it is written."""

    idempotency_key: str
    task_name: str
    cron: str | None = None
    interval_ms: int | None = None  # instead of cron: every interval_ms from anchor
    anchor: datetime | None = None  # None: the job's creation time, then kept
    timezone: str = "UTC"
    queue: str | None = None
    args: tuple[object, ...] = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)
    misfire: MisfireRule = field(default_factory=MisfireRule)
    jitter_ms: int = 0
    retry: RetryPolicy | None = None
    overlap: str = "skip"
    name: str = ""
    calendars: tuple[str, ...] = ()  # names of the tenant's exclusion calendars

    def __post_init__(self) -> None:
        self.job_spec()

    def job_spec(self) -> specs.JobSpec:
        """The declaration as a validated job spec, its first fire time from now. Raises
        InvalidJob or InvalidSchedule naming what to change."""
        args, kwargs = as_json(self.args, self.kwargs)
        schedule: dict[str, object] = (
            {"interval_ms": self.interval_ms} if self.cron is None else
            {"cron_expression": self.cron})
        if self.cron is not None and self.interval_ms is not None:
            raise InvalidJob("give cron or interval_ms, not both", field="cron")
        if self.anchor is not None:
            schedule["interval_anchor"] = self.anchor
        item = {"job_type": self.task_name, "name": self.name, **schedule,
                "timezone": self.timezone, "args": args, "kwargs": kwargs,
                "jitter_ms": self.jitter_ms, "overlap_policy": self.overlap,
                **specs.misfire_fields(self.misfire), **python_args.calendars(self.calendars)}
        if self.queue is not None:
            item["queue"] = self.queue
        if self.retry is not None:
            item["retry_policy"] = specs.retry_fields(self.retry)
        if problem := specs.idempotency_key_problem(self.idempotency_key):
            raise InvalidJob(specs.python_message("idempotency_key", problem),
                             field="idempotency_key")
        try:
            return specs.checked_spec(item, job_writer.current_limits())
        except SpecInvalid as exc:
            raise specs.python_error(exc) from None

    def job_fields(self) -> dict[str, object]:
        """The job's fields as the job writer stores them (:func:`scheduler.job_writer.
        row_fields`), so what is declared and what is stored compare equal."""
        return job_writer.row_fields(self.job_spec())


@dataclass(frozen=True)
class SyncResult:
    """What syncing one declaration did, to which job, and which fields it changed."""

    outcome: SyncOutcome
    job: Job
    changed: tuple[str, ...] = ()


def sync_cron_job(spec: CronJobSpec, *, tenant: Tenant, by: str = "") -> SyncResult:
    """Create the job of ``spec`` for ``tenant``, or bring the existing one in line with it.
    Raises :class:`InvalidJob` (or :class:`~scheduler.errors.InvalidSchedule`) saying what to
    change, among them when the job was cancelled."""
    job_spec = spec.job_spec()
    desired = job_writer.row_fields(job_spec)
    with transaction.atomic():
        job = (
            Job.objects.for_tenant(tenant)
            .select_for_update()
            .filter(idempotency_key=spec.idempotency_key)
            .first()
        )
        if job is None:
            job = job_writer.create(tenant.tenant_id, job_spec,
                                    idempotency_key=spec.idempotency_key, by=by)
            return SyncResult(SyncOutcome.CREATED, job)
        if job.status == JobStatus.CANCELLED:
            raise InvalidJob(
                f"its job {job.job_id} was cancelled"
                + (f" by {job.cancelled_by}" if job.cancelled_by else "")
                + "; a cancelled job keeps its key, so delete that job (admin, REST API or "
                "scheduler.api.delete) to have it created again",
                field="status",
            )
        declared = DECLARED_FIELDS + (("interval_anchor",) if spec.anchor is not None else ())
        changed = tuple(name for name in declared if getattr(job, name) != desired[name])
        if not changed:
            return SyncResult(SyncOutcome.UNCHANGED, job)
        # reschedule() owns the schedule, the time zone and the timer; the other declared
        # fields are read by the beat at each occurrence, so writing them suffices.
        schedule_fields = ("cron_expression", "interval_ms", "interval_anchor", "timezone")
        others = {name: desired[name] for name in changed if name not in schedule_fields}
        if bool(job.interval_ms) != bool(spec.interval_ms):  # cron <-> interval, in place
            others |= {"cron_expression": desired["cron_expression"],
                       "interval_ms": desired["interval_ms"],
                       "interval_anchor": desired["interval_anchor"]}
        if others.get("calendars"):  # the tenant's own, leaving the job an occurrence
            calendar_store.check_job_calendars(
                tenant.tenant_id, others["calendars"],
                job_writer.spec_schedule(str(job.job_id), job_spec), now_ms=now_ms())
        if others:
            Job.objects.filter(pk=job.pk).update(**others)
        if spec.interval_ms is None:
            job = api.reschedule(job.job_id, tenant=tenant, cron=spec.cron,
                                 timezone=spec.timezone, by=by)
        else:
            job = api.reschedule(job.job_id, tenant=tenant, every=spec.interval_ms / 1000,
                                 anchor=spec.anchor, timezone=spec.timezone, by=by)
        return SyncResult(SyncOutcome.UPDATED, job, changed)


def resolve_tenant(ref: Tenant | uuid.UUID | str) -> Tenant:
    """The active tenant a slug or id names. Raises :class:`InvalidJob` (field ``tenant``)."""
    if isinstance(ref, Tenant):
        tenant = ref
    else:
        text = str(ref).strip()
        try:
            tenant = Tenant.objects.filter(tenant_id=uuid.UUID(text)).first()
        except ValueError:
            tenant = Tenant.objects.filter(slug=text).first()
        if tenant is None:
            raise InvalidJob(f"no tenant has the slug or id {text!r}", field="tenant")
    if not tenant.is_active:
        raise InvalidJob(f"tenant {tenant.slug!r} is disabled", field="tenant")
    return tenant


def default_tenant(slug_or_id: str | None) -> Tenant | None:
    """The tenant of ``--tenant``; without it, the only active tenant if there is exactly one,
    else None (each declaration must then name its own)."""
    if slug_or_id:
        return resolve_tenant(slug_or_id)
    tenants = list(Tenant.objects.filter(is_active=True)[:2])
    return tenants[0] if len(tenants) == 1 else None


def idempotency_key(prefix: str, name: str) -> str:
    """``<prefix>:<name>``, shortened with a digest of the whole when over the column's size."""
    key = f"{prefix}:{name}"
    if len(key) <= IDEMPOTENCY_KEY_MAX_CHARS:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: IDEMPOTENCY_KEY_MAX_CHARS - len(digest) - 1]}#{digest}"


def as_json(args: object, kwargs: object) -> tuple[list, dict]:
    """``args`` and ``kwargs`` as they read back from the jobs table (JSON): tuples become
    lists. Raises :class:`InvalidJob` when they are not JSON-serialisable."""
    try:
        args_json, kwargs_json = json.loads(json.dumps([list(args), dict(kwargs)]))
    except (TypeError, ValueError) as exc:
        raise InvalidJob(
            f"args and kwargs must be JSON-serialisable: {exc}", field="args"
        ) from None
    return args_json, kwargs_json
