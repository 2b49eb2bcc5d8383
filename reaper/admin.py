"""Admin page of workers and their heartbeats: platform staff only (workers serve queues, not
tenants, and their names and hosts are the platform's)."""

from __future__ import annotations

from django.contrib import admin

from chronocore.staff import scope_of
from reaper.models import Worker


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("worker_id", "queue_name", "hostname", "pid", "last_heartbeat_at", "is_healthy")
    list_filter = ("is_healthy",)
    search_fields = ("worker_id", "hostname", "queue_name")
    readonly_fields = [f.name for f in Worker._meta.fields]

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
