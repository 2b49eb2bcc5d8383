"""Admin page of workers and their heartbeats: platform staff only (workers serve queues, not
tenants, and their names and hosts are the platform's)."""

from __future__ import annotations

from django.contrib import admin

from chronocore.staff import scope_of
from reaper.models import Worker, WorkerState


class WorkerStateFilter(admin.SimpleListFilter):
    """Up, stopped cleanly or lost, from the row's flags: a worker that went silent counts as
    lost once the reaper marked it down (the dashboard also counts the silent ones)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return WorkerState.choices

    def queryset(self, request, queryset):
        if self.value() == WorkerState.UP:
            return queryset.filter(is_healthy=True)
        if self.value() == WorkerState.STOPPED:
            return queryset.filter(stopped_at__isnull=False)
        if self.value() == WorkerState.LOST:
            return queryset.filter(is_healthy=False, stopped_at__isnull=True)
        return queryset


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("worker_id", "queue_name", "hostname", "pid", "last_heartbeat_at", "state",
                    "stopped_at")
    list_filter = (WorkerStateFilter,)
    search_fields = ("worker_id", "hostname", "queue_name")
    readonly_fields = [f.name for f in Worker._meta.fields]

    @admin.display(description="state")
    def state(self, worker: Worker) -> str:
        return worker.state().label

    def has_module_permission(self, request) -> bool:
        return scope_of(request.user).platform and super().has_module_permission(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return scope_of(request.user).platform and super().has_view_permission(request, obj)

    # Workers register themselves by heartbeating; the reaper marks them unhealthy.
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
