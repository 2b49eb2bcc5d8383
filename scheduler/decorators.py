"""``@chrono_job``: a Celery task of an existing app becomes a Chrono job, with one decorator.

::

    from scheduler.decorators import ChronoTask, chrono_job

    @chrono_job(cron="*/5 * * * *", timezone="Europe/Paris", queue="billing", tenant="acme")
    @app.task(name="billing.close_invoices", base=ChronoTask)   # or @shared_task(...)
    def close_invoices(): ...

    @chrono_job(every=timedelta(minutes=45), tenant="acme")    # an interval job
    @app.task(name="billing.sync_rates", base=ChronoTask)
    def sync_rates(): ...

    job_id = send_reminder.schedule(invoice_id, delay=600, idempotency_key=f"remind-{invoice_id}")
    send_reminder.cancel_job(job_id)           # pause_job, resume_job, trigger_job alike

A cron declaration becomes a job only when ``chrono sync-jobs`` runs (explicit, idempotent: one job
per task, its idempotency key derived from the task name), never as a side effect of importing a
module in some process. ``schedule()`` creates a one-time job at once.

Who runs the task. The beat publishes a Celery protocol v2 message naming the task to the job's
queue, so any worker that has the task registered and consumes that queue runs it: Chrono's
(``chrono worker --queues billing --include billing.tasks``) or the app's own (``celery -A proj
worker`` with ``chrono_queue("billing")`` in its ``task_queues``).

Who records the execution: the task's class, not this decorator. Celery picks what it calls for a
task when the worker builds the task's tracer: ``task.__call__`` if the task's *class* overrides
it, else ``task.run`` directly. So a wrapper set on the task object is silently bypassed, and
wrapping means changing the class. The decorator cannot do that cleanly: ``@app.task`` returns a
lazy proxy until the app is finalized (Celery documents that its attributes must not be touched
before), and ``@shared_task`` returns a proxy with one task object per app, each built from that
app's task base class. The base class is Celery's own extension point for exactly this, works
for both decorators and every app, composes with an app's own base by inheritance, and is visible
where the task is defined. Hence:

* in Chrono's worker nothing is needed: ``chrono worker --include`` imports the modules before
  Chrono's app is finalized, so ``@shared_task`` and ``@app.task`` tasks (shared between apps by
  default) get a copy registered on Chrono's app, whose task class is :class:`ChronoTask`;
* in the app's own worker, give the task ``base=ChronoTask``, or the app
  ``task_cls="scheduler.worker:ChronoTask"`` (every task at once; a task called without Chrono's
  headers runs exactly as before). An app with its own base class derives it from ChronoTask.

A worker that runs a Chrono message with a task that cannot record it logs an error saying this
(:func:`_report_unrecorded_execution`): the execution would otherwise stay ``DISPATCHED``.

The decorator never evaluates Celery's proxies at import time; the task is looked up when one of
its Chrono methods is called. Everything else (``delay``, ``apply_async``, ``s`` …) is the task's.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery.app.task import Task
from celery.local import Proxy
from celery.signals import task_prerun

from chronocore.models import Tenant
from scheduler import api, job_writer, python_args, specs
from scheduler.declared_jobs import CronJobSpec, as_json, idempotency_key, resolve_tenant
from scheduler.errors import InvalidJob, JobNotFound, SpecInvalid
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.models import Job
from scheduler.queues import chrono_queue
from scheduler.retry import RetryPolicy
from scheduler.worker import ChronoTask

__all__ = ["ChronoJobOptions", "ChronoJobTask", "ChronoTask", "chrono_job", "chrono_queue",
           "declared_tasks"]

log = logging.getLogger("chrono.decorators")

KEY_PREFIX = "chrono_job"

TenantRef = Tenant | uuid.UUID | str

_declared: list[ChronoJobTask] = []


@dataclass(frozen=True, kw_only=True)
class ChronoJobOptions:
    """What ``@chrono_job`` declares about a task, validated when the module is imported.

    ``retry`` (a dict of :class:`~scheduler.retry.RetryPolicy` fields) applies to the cron job
    and to every ``schedule()``; ``overlap`` (``allow``, ``skip``, ``buffer_one``,
    ``cancel_previous``) to the cron job.
    """

    cron: str | None = None
    interval_ms: int | None = None  # instead of cron (chrono_job's every=)
    timezone: str = "UTC"
    queue: str | None = None
    tenant: TenantRef | None = None
    misfire: MisfireRule = field(default_factory=MisfireRule)
    jitter_ms: int = 0
    retry: dict[str, object] | None = None
    overlap: str | None = None
    args: tuple[object, ...] = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)
    calendars: tuple[str, ...] = ()  # the tenant's exclusion calendars, by name

    def __post_init__(self) -> None:
        if self.cron is not None and self.interval_ms is not None:
            raise InvalidJob("give cron= or every=, not both", field="every")
        if self.cron is None and self.interval_ms is None and (
                self.jitter_ms or self.args or self.kwargs):
            raise InvalidJob(
                "jitter_ms, args and kwargs are for cron and interval jobs; pass cron= or "
                "every= too, or give arguments to schedule()",
                field="cron",
            )
        if self.retry is not None and not (
            isinstance(self.retry, dict) and all(isinstance(k, str) for k in self.retry)
        ):
            raise InvalidJob("retry= takes a dict of retry-policy fields, or None", field="retry")
        # Every rule of a job spec, now, at import, not at deploy (the task name is looked up
        # when the job is synced or scheduled).
        args, kwargs = as_json(self.args, self.kwargs)
        item = {"args": args, "kwargs": kwargs, "jitter_ms": self.jitter_ms,
                **specs.misfire_fields(self.misfire)}
        if self.calendars:
            if self.cron is None and self.interval_ms is None:
                raise InvalidJob("calendars are for cron and interval jobs; pass cron= or "
                                 "every= too", field="calendars")
            item["calendars"] = list(self.calendars)
        for key, value in (("cron_expression", self.cron), ("interval_ms", self.interval_ms),
                           ("queue", self.queue), ("overlap_policy", self.overlap),
                           ("retry_policy", self.retry)):
            if value is not None:
                item[key] = value
        if self.cron is not None or self.interval_ms is not None:
            item["timezone"] = self.timezone
        try:
            specs.check_declaration(item, job_writer.current_limits())
        except SpecInvalid as exc:
            raise specs.python_error(exc) from None

    @property
    def retry_policy(self) -> RetryPolicy | None:
        """The declared ``retry`` as a policy (None: the job is not retried)."""
        return None if self.retry is None else RetryPolicy(**self.retry)


def chrono_job(
    task: object = None,
    /,
    *,
    cron: str | None = None,
    every: timedelta | float | None = None,
    timezone: str = "UTC",
    queue: str | None = None,
    tenant: TenantRef | None = None,
    misfire: MisfireRule | MisfirePolicy | str | None = None,
    jitter_ms: int = 0,
    retry: dict[str, object] | None = None,
    overlap: str | None = None,
    args: tuple[object, ...] | list[object] = (),
    kwargs: Mapping[str, object] | None = None,
    calendars: tuple[str, ...] | list[str] = (),
) -> ChronoJobTask | Callable[[object], ChronoJobTask]:
    """Make a Celery task a Chrono job; stack it above ``@app.task`` or ``@shared_task``.

    With ``cron`` (evaluated in ``timezone``, DST as Debian cron), ``chrono sync-jobs`` keeps one
    cron job for the task, run with ``args``/``kwargs`` on ``queue`` for ``tenant`` (a slug or
    id; ``sync-jobs --tenant`` otherwise), with the ``misfire`` policy and ``jitter_ms`` spread
    of :func:`scheduler.api.schedule_cron`. Without it, the task only gains ``schedule()`` and
    the job methods. With ``every`` (a timedelta or seconds) instead of ``cron``, the job is an
    interval job (:func:`scheduler.api.schedule_interval`: elapsed time from its creation).
    ``calendars`` names the tenant's exclusion calendars (checked against the tenant's when
    the job is synced: ``chrono sync-jobs``). Bad options raise
    :class:`~scheduler.errors.InvalidJob` or :class:`~scheduler.errors.InvalidSchedule` at
    import, naming what to change.
    """
    options = ChronoJobOptions(
        cron=cron,
        interval_ms=None if every is None else python_args.interval_ms_of(every),
        timezone=timezone,
        queue=queue,
        tenant=tenant,
        misfire=_misfire_rule(misfire),
        jitter_ms=jitter_ms,
        retry=retry,
        overlap=overlap,
        args=tuple(args),
        kwargs=dict(kwargs or {}),
        calendars=tuple(python_args.calendars(calendars).get("calendars", ())),
    )

    def decorate(celery_task: object) -> ChronoJobTask:
        # type(), never isinstance(): isinstance() would ask a Celery proxy for its
        # __class__, which evaluates it at import time.
        if issubclass(type(celery_task), ChronoJobTask):
            raise TypeError("@chrono_job is applied twice to one task; keep one")
        if not issubclass(type(celery_task), Proxy | Task):
            raise TypeError(
                f"@chrono_job decorates a Celery task, not {celery_task!r}: put it above "
                "@app.task or @shared_task"
            )
        declared = ChronoJobTask(celery_task, options)
        _declared.append(declared)
        return declared

    return decorate if task is None else decorate(task)


def declared_tasks(module: str | None = None) -> list[ChronoJobTask]:
    """The tasks decorated so far in this process, in import order; with ``module``, only those
    defined in that module or package (this looks the tasks up: call it once apps are set up)."""
    if module is None:
        return list(_declared)
    return [task for task in _declared
            if (task._get_current_object().__module__ + ".").startswith(module + ".")]


class ChronoJobTask(Proxy):
    """A Celery task with Chrono's job methods. It is a Celery proxy: attribute access, calls,
    ``isinstance`` and pickling all go to the task itself (looked up when first used)."""

    def __init__(self, task: object, options: ChronoJobOptions) -> None:
        super().__init__(_task_resolver(task))
        object.__setattr__(self, "_chrono_options", options)

    @property
    def chrono(self) -> ChronoJobOptions:
        """What ``@chrono_job`` declared (``task.chrono.cron``, ``.retry`` …)."""
        return object.__getattribute__(self, "_chrono_options")

    def cron_job_spec(self) -> CronJobSpec | None:
        """The cron job ``chrono sync-jobs`` keeps for this task; None for a one-time-only
        task. The idempotency key is derived from the task's name."""
        options = self.chrono
        if options.cron is None and options.interval_ms is None:
            return None
        task_name = self._get_current_object().name
        return CronJobSpec(
            idempotency_key=idempotency_key(KEY_PREFIX, task_name),
            task_name=task_name,
            cron=options.cron,
            interval_ms=options.interval_ms,
            timezone=options.timezone,
            queue=options.queue,
            args=options.args,
            kwargs=options.kwargs,
            misfire=options.misfire,
            jitter_ms=options.jitter_ms,
            retry=options.retry_policy,
            overlap=options.overlap or "skip",
            name=task_name,
            calendars=options.calendars,
        )

    def schedule(
        self,
        *args: object,
        delay: timedelta | float | None = None,
        at: datetime | None = None,
        idempotency_key: str | None = None,
        tenant: TenantRef | None = None,
        queue: str | None = None,
        **kwargs: object,
    ) -> uuid.UUID:
        """Run the task once with ``args``/``kwargs``, ``delay`` (seconds or timedelta) from now
        or ``at`` an aware datetime; returns the job id. With ``idempotency_key``, a second call
        with the same key returns the first job's id and creates nothing. ``delay``, ``at``,
        ``idempotency_key``, ``tenant`` and ``queue`` are Chrono's: pass a task argument with
        one of these names positionally."""
        task = self._get_current_object()
        _check_signature(task, args, kwargs)
        job = api.schedule_once(
            task.name,
            tenant=self._tenant(tenant),
            args=args,
            kwargs=kwargs,
            delay=delay,
            at=at,
            queue=queue or self.chrono.queue,
            name=task.name,
            idempotency_key=idempotency_key,
            retry=self.chrono.retry_policy,
        )
        return job.job_id

    def cancel_job(self, job_id: uuid.UUID | str, *, tenant: TenantRef | None = None,
                   by: str = "") -> bool:
        """:func:`scheduler.api.cancel` for a job of this task."""
        return api.cancel(job_id, tenant=self._own_job_tenant(job_id, tenant), by=by)

    def pause_job(self, job_id: uuid.UUID | str, *, tenant: TenantRef | None = None,
                  by: str = "") -> bool:
        """:func:`scheduler.api.pause` for a job of this task."""
        return api.pause(job_id, tenant=self._own_job_tenant(job_id, tenant), by=by)

    def resume_job(self, job_id: uuid.UUID | str, *, tenant: TenantRef | None = None,
                   by: str = "") -> bool:
        """:func:`scheduler.api.resume` for a job of this task."""
        return api.resume(job_id, tenant=self._own_job_tenant(job_id, tenant), by=by)

    def trigger_job(self, job_id: uuid.UUID | str, *, tenant: TenantRef | None = None,
                    by: str = "") -> bool:
        """:func:`scheduler.api.trigger` for a job of this task."""
        return api.trigger(job_id, tenant=self._own_job_tenant(job_id, tenant), by=by)

    def _tenant(self, tenant: TenantRef | None) -> Tenant:
        ref = tenant if tenant is not None else self.chrono.tenant
        if ref is None:
            raise InvalidJob(
                "no tenant: pass tenant= (a slug or id) here or to @chrono_job", field="tenant"
            )
        return resolve_tenant(ref)

    def _own_job_tenant(self, job_id: uuid.UUID | str, tenant: TenantRef | None) -> Tenant:
        """The tenant, once ``job_id`` is known to be one of its jobs of this task (so that a
        job of another task is never cancelled through this one by mistake)."""
        resolved = self._tenant(tenant)
        task_name = self._get_current_object().name
        if not Job.objects.for_tenant(resolved).filter(job_id=job_id, job_type=task_name).exists():
            raise JobNotFound(f"no job {job_id} of task {task_name} for this tenant")
        return resolved


def _task_resolver(task: object) -> Callable[[], Task]:
    if issubclass(type(task), Proxy):
        return task._get_current_object
    return lambda: task


def _misfire_rule(misfire: MisfireRule | MisfirePolicy | str | None) -> MisfireRule:
    if misfire is None or isinstance(misfire, MisfireRule):
        return misfire or MisfireRule()
    try:
        return MisfireRule(MisfirePolicy(misfire))
    except ValueError:
        raise InvalidJob(
            f"misfire={misfire!r} is not a policy; use one of "
            f"{', '.join(p.value for p in MisfirePolicy)} or a MisfireRule",
            field="misfire",
        ) from None


def _check_signature(task: Task, args: tuple, kwargs: dict) -> None:
    """Refuse arguments the task cannot take now, as ``apply_async`` does, rather than in the
    worker when the job fires; and arguments that are not JSON."""
    as_json(args, kwargs)
    if not task.typing:
        return
    try:
        task.__header__(*args, **kwargs)
    except TypeError as exc:
        raise InvalidJob(f"{task.name}: {exc}", field="args") from None


@task_prerun.connect
def _report_unrecorded_execution(task: Task | None = None, **_: object) -> None:
    """In any worker that imported this module: say loudly when a Chrono message is run by a
    task whose class cannot record the execution (see the module's docstring)."""
    execution_id = getattr(getattr(task, "request", None), "chrono_execution_id", None)
    if execution_id and not isinstance(task, ChronoTask):
        log.error(
            "task %s runs Chrono execution %s but cannot record it (its class %s is not a "
            "ChronoTask): give the task base=ChronoTask, or its Celery app "
            "task_cls='scheduler.worker:ChronoTask'",
            task.name, execution_id, type(task).__name__,
        )
