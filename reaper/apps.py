"""The reaper Django app: the worker registry (the `Worker` rows heartbeats keep) and the reaper."""

from __future__ import annotations

from django.apps import AppConfig


class ReaperConfig(AppConfig):
    name = "reaper"
    verbose_name = "Workers"
    default_auto_field = "django.db.models.BigAutoField"
