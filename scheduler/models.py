"""Jobs and their executions: the source of truth every timer in Redis is derived from.

States are the vocabulary of DESIGN.md: a job is ACTIVE, PAUSED, COMPLETED or CANCELLED; an
execution moves SCHEDULED → DISPATCHED → RUNNING → SUCCEEDED / FAILED / … Transitions are
conditional updates (``WHERE status = <expected>``) made by the lifecycle's stages (their rules and
the table of moves are :mod:`scheduler.lifecycle`) and :mod:`scheduler.api`, never by saving a
model instance blindly.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from chronocore.models import Tenant


class JobStatus(models.TextChoices):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"


class MisfirePolicyChoice(models.TextChoices):
    FIRE_ONCE = "fire_once"
    FIRE_ALL = "fire_all"
    SKIP = "skip"


class TimerKey(models.Func):
    """The first 32 bits of a job id as a number: what its timer's shard is derived from
    (:func:`scheduler.sharding.shard_for`), so the jobs of one shard are one index range."""

    template = "(('x' || substr(replace(%(expressions)s::text, '-', ''), 1, 8))::bit(32)::bigint)"
    output_field = models.BigIntegerField()


class OverlapPolicy(models.TextChoices):
    """What a cron job's occurrence does while the previous one still runs."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    CANCEL_PREVIOUS = "cancel_previous"


class ExecutionStatus(models.TextChoices):
    SCHEDULED = "SCHEDULED"
    DISPATCHED = "DISPATCHED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RETRY_WAIT = "RETRY_WAIT"
    DEAD_LETTERED = "DEAD_LETTERED"
    LOST = "LOST"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"


FINISHED_EXECUTION_STATUSES = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.DEAD_LETTERED,
    ExecutionStatus.CANCELLED,
    ExecutionStatus.SKIPPED,
)


class JobQuerySet(models.QuerySet):
    def for_tenant(self, tenant: Tenant | uuid.UUID | str) -> JobQuerySet:
        tenant_id = tenant.tenant_id if isinstance(tenant, Tenant) else tenant
        return self.filter(tenant_id=tenant_id)

    def pending(self) -> JobQuerySet:
        """Jobs that still have an occurrence to fire: they own a timer in Redis."""
        return self.filter(status=JobStatus.ACTIVE, next_run_at__isnull=False)


class Job(models.Model):
    """A one-time job, a recurring cron job (``cron_expression``) or an interval job
    (``interval_ms`` from ``interval_anchor``, in elapsed time: :mod:`scheduler.intervals`)."""

    job_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: job_tenant_status_idx starts with the tenant (every index costs each
    # of the 50,000 rows a second that bulk ingest writes).
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs",
                               db_index=False)
    name = models.CharField(max_length=200, blank=True, default="")
    job_type = models.CharField(max_length=200, help_text="The Celery task name to run.")
    cron_expression = models.CharField(max_length=200, null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    interval_ms = models.BigIntegerField(
        null=True, blank=True, help_text="An interval job's period in milliseconds.")
    interval_anchor = models.DateTimeField(
        null=True, blank=True, help_text="An interval job's first occurrence; the others follow "
        "every interval_ms after it.")
    next_run_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.ACTIVE)
    retry_count = models.PositiveIntegerField(default=0, help_text="Retries made, all occurrences.")
    max_retries = models.PositiveIntegerField(default=0)
    retry_policy = models.JSONField(
        default=dict,
        db_default={},
        blank=True,
        help_text="Backoff of scheduler.retry.RetryPolicy as JSON; max_retries bounds attempts.",
    )
    soft_timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    hard_timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    overlap_policy = models.CharField(
        max_length=16, choices=OverlapPolicy.choices, default=OverlapPolicy.SKIP,
        db_default=OverlapPolicy.SKIP,
    )
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=200, default="chrono")
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    # The database fills them too (db_default), so the bulk COPY leaves them out: parsing two
    # timestamps per row cost PostgreSQL about a tenth of the COPY.
    created_at = models.DateTimeField(auto_now_add=True, db_default=Now())
    updated_at = models.DateTimeField(auto_now=True, db_default=Now())
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.CharField(max_length=200, blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    misfire_policy = models.CharField(
        max_length=16,
        choices=MisfirePolicyChoice.choices,
        default=MisfirePolicyChoice.FIRE_ONCE,
        db_default=MisfirePolicyChoice.FIRE_ONCE,
    )
    misfire_fire_all_limit = models.PositiveIntegerField(default=10, db_default=10)
    jitter_ms = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Spread each occurrence over [0, jitter) ms, the same every time.",
    )
    # db_default: the job writer's COPY and the workflow engine's own INSERT leave it out.
    calendars = ArrayField(
        models.CharField(max_length=100), default=list, blank=True,
        db_default=models.Value([], output_field=ArrayField(models.CharField(max_length=100))),
        help_text="Names of the tenant's exclusion calendars (scheduler.calendars): an "
        "occurrence on a day one of them excludes is skipped.")
    timer_key = models.GeneratedField(
        expression=TimerKey("job_id"), output_field=models.BigIntegerField(), db_persist=True
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        db_table = "chrono_job"
        indexes = [
            # Jobs by status across tenants, in fire-time order (the product brief's index:
            # the admin's status filter, overdue and upcoming jobs across tenants). Due jobs
            # are found through the timer store and job_pending_timer_key_idx.
            models.Index(fields=["status", "next_run_at"], name="job_status_next_run_idx"),
            models.Index(fields=["tenant", "status"], name="job_tenant_status_idx"),
            models.Index(
                fields=["timer_key"],
                name="job_pending_timer_key_idx",
                condition=models.Q(status="ACTIVE", next_run_at__isnull=False),
            ),
            # Ended jobs, oldest end first, for the retention pass (scheduler.ended_jobs).
            models.Index(
                fields=["updated_at"],
                name="job_ended_idx",
                condition=models.Q(status__in=["COMPLETED", "CANCELLED"]),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(cron_expression__isnull=True)
                | models.Q(interval_ms__isnull=True),
                name="job_cron_or_interval",
            ),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="job_tenant_idempotency_key_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} ({self.job_id})"

    @property
    def is_recurring(self) -> bool:
        return bool(self.cron_expression) or bool(self.interval_ms)


class ExecutionQuerySet(models.QuerySet):
    def for_tenant(self, tenant: Tenant | uuid.UUID | str) -> ExecutionQuerySet:
        tenant_id = tenant.tenant_id if isinstance(tenant, Tenant) else tenant
        return self.filter(tenant_id=tenant_id)


class Execution(models.Model):
    """One occurrence of a job, dispatched to a worker.

    The first attempt of an occurrence has a deterministic id (:func:`scheduler.lifecycle.
    execution_id_for`), so a timer published twice (a beat died between publish and ack) maps to
    one row, and the worker-side start (``DISPATCHED → RUNNING``) lets only one delivery run.
    """

    execution_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The foreign keys' own indexes would repeat the first column of execution_job_started_idx
    # and execution_tenant_status_idx: every status change writes every index of this table.
    # No foreign-key constraint in PostgreSQL: its check, one locking query per inserted row
    # at commit, cost more than the insert itself and halved the beat's ceiling (2,500 vs
    # 4,950 jobs/s). The beat's insert locks the jobs it reads instead (FOR KEY SHARE, one
    # statement for the batch), and a job is deleted under FOR UPDATE with its executions.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="executions",
                            db_index=False, db_constraint=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="executions",
                               db_index=False)
    attempt = models.PositiveIntegerField(default=1)
    worker_id = models.CharField(max_length=200, null=True, blank=True)
    scheduled_for = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.SCHEDULED
    )
    exit_code = models.IntegerField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    # What the execution's tenant sees of a failure: the exception's type and message, with
    # paths into the server's directories hidden. The traceback is for platform staff only.
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(
        blank=True,
        default="",
        db_default="",
        help_text="The failure's Python traceback (platform staff only; tenants see error).",
    )
    reason = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        help_text="Why it was skipped, cancelled or lost.",
    )
    logs_url = models.URLField(max_length=500, blank=True, default="")
    fencing_token = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    objects = ExecutionQuerySet.as_manager()

    class Meta:
        db_table = "chrono_execution"
        indexes = [
            models.Index(fields=["job", "started_at"], name="execution_job_started_idx"),
            models.Index(fields=["tenant", "status"], name="execution_tenant_status_idx"),
            # The id second (migration 0015): a look-up by (execution_id, scheduled_for), the
            # partition key, finds its row in one entry of either index.
            models.Index(fields=["scheduled_for", "execution_id"],
                         name="execution_scheduled_for_idx"),
            # What a worker is running now (the dashboard's workers, a dead worker's
            # executions): RUNNING rows only, so that an execution's other status changes
            # write one index fewer (migration 0016). The API's ?worker= filter over a
            # tenant's history reads the scheduled_for index, newest first, with the filter.
            models.Index(
                fields=["worker_id"],
                name="execution_worker_running_idx",
                condition=models.Q(status="RUNNING"),
            ),
            models.Index(
                fields=["lease_expires_at"],
                name="execution_running_lease_idx",
                condition=models.Q(status="RUNNING"),
            ),
            models.Index(
                fields=["retry_at"],
                name="execution_retry_wait_idx",
                condition=models.Q(status="RETRY_WAIT"),
            ),
            models.Index(
                fields=["job", "status"],
                name="execution_job_active_idx",
                condition=models.Q(status__in=["SCHEDULED", "DISPATCHED", "RUNNING"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id} [{self.status}]"


class ExecutionRollup(models.Model):
    """Per-minute counters of one tenant's task, kept by the processes that do the work
    (:mod:`scheduler.rollups`); the dashboard reads these, never a count of executions.
    ``tenant_id`` is :data:`scheduler.rollups.ALL_TENANTS` for the platform-wide sums.
    Histogram columns hold one count per bucket of ``rollups.BUCKET_BOUNDS_MS``."""

    id = models.BigAutoField(primary_key=True)
    minute = models.DateTimeField()
    tenant_id = models.UUIDField()
    task = models.CharField(max_length=200)
    dispatched = models.IntegerField(default=0)
    started = models.IntegerField(default=0)
    succeeded = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    duration_sum_ms = models.BigIntegerField(default=0)
    dispatch_lateness = ArrayField(models.IntegerField())
    start_lateness = ArrayField(models.IntegerField())
    duration = ArrayField(models.IntegerField())

    class Meta:
        db_table = "chrono_execution_rollup"
        constraints = [
            # Leading with the tenant: the dashboard reads one tenant's (or all tenants')
            # rows of the last hour, a range of this index.
            models.UniqueConstraint(fields=["tenant_id", "minute", "task"],
                                    name="execution_rollup_key"),
        ]
        # The oldest minutes first, for the retention pass (scheduler.rollups.EXPIRED). A row
        # is inserted once a minute, tenant and task and then updated in place (HOT: no
        # indexed column changes), so the index costs an entry a new row.
        indexes = [models.Index(fields=["minute"], name="execution_rollup_minute_idx")]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.task}"


class JobWatch(models.Model):
    """A job whose executions' ends someone above the scheduler follows (``watcher``, e.g.
    ``workflow``): when one of its executions reaches a final status, the statement that puts it
    there also writes an :class:`ExecutionEnd` (a trigger on ``chrono_execution``, so every
    path that ends an execution does, present and future)."""

    job_id = models.UUIDField(primary_key=True)
    watcher = models.CharField(max_length=32)

    class Meta:
        db_table = "chrono_job_watch"

    def __str__(self) -> str:
        return f"{self.job_id} ({self.watcher})"


class ExecutionEnd(models.Model):
    """The end of an execution of a watched job, waiting for its watcher to apply it (and
    delete it in the same transaction). Inserts notify the ``chrono_execution_end`` channel."""

    id = models.BigAutoField(primary_key=True)
    watcher = models.CharField(max_length=32)
    job_id = models.UUIDField()
    execution_id = models.UUIDField()
    status = models.CharField(max_length=16)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "chrono_execution_end"
        indexes = [models.Index(fields=["watcher", "id"], name="execution_end_watcher_idx")]

    def __str__(self) -> str:
        return f"{self.execution_id} {self.status}"


class JobCount(models.Model):
    """Jobs by status per tenant, kept by triggers on ``chrono_job`` (:mod:`scheduler.job_counts`):
    every statement that inserts, deletes or changes the status of jobs appends its net change
    per tenant and status (and under ``rollups.ALL_TENANTS``), and a periodic fold sums each
    tenant's rows into one. The count of a tenant's jobs in a status is the sum of its rows."""

    id = models.BigAutoField(primary_key=True)
    tenant_id = models.UUIDField()
    status = models.CharField(max_length=16)
    jobs = models.BigIntegerField()
    folded = models.BooleanField(default=False, db_default=False)

    class Meta:
        db_table = "chrono_job_count"
        indexes = [
            # The dashboard's read: one tenant's (or all tenants') rows.
            models.Index(fields=["tenant_id", "status"], name="job_count_tenant_idx"),
            # The fold's: the keys that changed since it last ran.
            models.Index(fields=["tenant_id", "status"], name="job_count_unfolded_idx",
                         condition=models.Q(folded=False)),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.status} {self.jobs:+d}"


class CalendarQuerySet(models.QuerySet):
    def for_tenant(self, tenant: Tenant | uuid.UUID | str) -> CalendarQuerySet:
        tenant_id = tenant.tenant_id if isinstance(tenant, Tenant) else tenant
        return self.filter(tenant_id=tenant_id)


class Calendar(models.Model):
    """A tenant's named exclusion calendar: local days of its time zone on which the jobs that
    name it do not fire (dates, date ranges and cron day rules; :mod:`scheduler.calendars`
    reads them). Jobs name it in ``Job.calendars``; one referenced by a job is not deleted or
    renamed (:mod:`scheduler.calendar_store`)."""

    calendar_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="calendars",
                               db_index=False)
    name = models.CharField(max_length=100)
    timezone = models.CharField(max_length=64, default="UTC")
    description = models.TextField(blank=True, default="")
    dates = models.JSONField(default=list, blank=True,
                             help_text='Days excluded, e.g. ["2026-12-25", "2027-01-01"].')
    ranges = models.JSONField(default=list, blank=True,
                              help_text='Ranges of days excluded, both ends included, e.g. '
                              '["2026-12-24/2027-01-02"].')
    rules = models.JSONField(default=list, blank=True,
                             help_text='Cron day fields (day-of-month month day-of-week), e.g. '
                             '["* * SAT,SUN", "25 DEC *"].')
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = CalendarQuerySet.as_manager()

    class Meta:
        db_table = "chrono_calendar"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="calendar_tenant_name_uniq"),
        ]

    def __str__(self) -> str:
        return self.name
