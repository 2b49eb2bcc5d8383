"""The search Django app: the audit outbox, the indexer and the audit search pages."""

from __future__ import annotations

from django.apps import AppConfig


class SearchConfig(AppConfig):
    name = "search"
    verbose_name = "Audit log"
    default_auto_field = "django.db.models.BigAutoField"
