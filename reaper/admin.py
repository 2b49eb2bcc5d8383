"""Admin page of workers and their heartbeats."""

from __future__ import annotations

from django.contrib import admin

from reaper.models import Worker


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("worker_id", "queue_name", "hostname", "pid", "last_heartbeat_at", "is_healthy")
    list_filter = ("is_healthy",)
    search_fields = ("worker_id", "hostname", "queue_name")
    readonly_fields = [f.name for f in Worker._meta.fields]

    # Workers register themselves by heartbeating; the reaper marks them unhealthy.
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
