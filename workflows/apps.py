"""The workflows Django app: definitions and their versions, runs, and the engine's tables."""

from __future__ import annotations

from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The retention pass (scheduler.retention, which may not import this app) deletes the
        # finished runs through this receiver, in every process that runs a pass.
        from workflows import retention  # noqa: F401
