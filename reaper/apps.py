"""The reaper Django app: workers and their heartbeats."""

from __future__ import annotations

from django.apps import AppConfig


class ReaperConfig(AppConfig):
    name = "reaper"
    verbose_name = "Workers"
    default_auto_field = "django.db.models.BigAutoField"
