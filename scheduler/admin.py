"""Admin pages of jobs and executions: what is scheduled, what ran, how late, with what result.

A job changes only through :mod:`scheduler.api`, as from the REST API: the admin's actions pause,
resume, trigger and cancel, and its delete, call it, so each change is validated, audited with the
staff user as actor, reaches the job's timer in Redis and takes the job's lock (a delete racing the
beat's insert of an execution leaves none behind). Its form edits the name alone; a job's schedule
and options change through the API (a row edited here would not move its timer). Jobs are created
through the API, and executions by the beat: neither is added here.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduler import api
from scheduler.errors import JobNotFound, SchedulerError
from scheduler.models import Execution, Job


def _job_action(
    name: str, description: str, change: Callable[..., bool]
) -> Callable[[admin.ModelAdmin, HttpRequest, QuerySet], None]:
    """An admin action applying ``change(job_id, tenant=…)`` of :mod:`scheduler.api` to each
    selected job, reporting how many changed and why the others did not."""

    def action(model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
        changed, unchanged = 0, []
        for job in queryset.only("job_id", "tenant_id", "status"):
            try:
                if change(job.job_id, tenant=job.tenant_id):
                    changed += 1
                else:
                    unchanged.append(f"{job.job_id} ({job.status})")
            except SchedulerError as exc:
                unchanged.append(f"{job.job_id}: {exc}")
        if changed:
            model_admin.message_user(request, f"{description}: {changed} job(s).", messages.SUCCESS)
        if unchanged:
            model_admin.message_user(request, f"Not {description.lower()}: "
                                     + ", ".join(unchanged[:20]), messages.WARNING)

    action.__name__ = name
    return admin.action(description=f"{description} the selected jobs")(action)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "job_type", "name", "tenant", "status", "cron_expression", "timezone", "next_run_at",
        "queue", "created_at",
    )
    list_filter = ("status", "queue", "tenant")
    search_fields = ("job_id", "job_type", "name", "idempotency_key")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)
    show_full_result_count = False
    actions = (
        _job_action("pause_jobs", "Paused", api.pause),
        _job_action("resume_jobs", "Resumed", api.resume),
        _job_action("trigger_jobs", "Triggered", api.trigger),
        _job_action("cancel_jobs", "Cancelled", api.cancel),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        return [f.name for f in Job._meta.fields if f.name != "name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        api.delete(obj.job_id, tenant=obj.tenant_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for job_id, tenant_id in queryset.values_list("job_id", "tenant_id"):
            try:
                api.delete(job_id, tenant=tenant_id)
            except JobNotFound:
                continue  # deleted meanwhile


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    list_display = (
        "execution_id", "job", "status", "attempt", "worker_id", "scheduled_for", "started_at",
        "finished_at", "start_lateness_ms",
    )
    list_filter = ("status", "tenant")
    search_fields = ("execution_id", "job__job_id", "worker_id")
    readonly_fields = [f.name for f in Execution._meta.fields]
    list_select_related = ("job", "tenant")
    ordering = ("-scheduled_for",)
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="start lateness (ms)")
    def start_lateness_ms(self, execution: Execution) -> int | None:
        if execution.started_at is None:
            return None
        return round((execution.started_at - execution.scheduled_for).total_seconds() * 1000)
