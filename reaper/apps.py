"""The reaper Django app: the worker registry (the `Worker` rows heartbeats keep) and the reaper."""

from __future__ import annotations

from django.apps import AppConfig


class ReaperConfig(AppConfig):
    name = "reaper"
    verbose_name = "Workers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The retention pass (scheduler.retention, which may not import this app) deletes the
        # workers gone since its cutoff through this receiver.
        from reaper import retention  # noqa: F401
