"""Admin pages of jobs and executions: what is scheduled, what ran, how late, with what result."""

from __future__ import annotations

from django.contrib import admin

from scheduler.models import Execution, Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "job_type", "name", "tenant", "status", "cron_expression", "timezone", "next_run_at",
        "queue", "created_at",
    )
    list_filter = ("status", "queue", "tenant")
    search_fields = ("job_id", "job_type", "name", "idempotency_key")
    readonly_fields = ("job_id", "created_at", "updated_at", "cancelled_at", "cancelled_by")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)
    show_full_result_count = False


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

    @admin.display(description="start lateness (ms)")
    def start_lateness_ms(self, execution: Execution) -> int | None:
        if execution.started_at is None:
            return None
        return round((execution.started_at - execution.scheduled_for).total_seconds() * 1000)
