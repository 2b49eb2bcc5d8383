"""The chronocore Django app: tenancy's models (tenants, API keys, idempotency records)."""

from __future__ import annotations

from django.apps import AppConfig


class ChronoCoreConfig(AppConfig):
    name = "chronocore"
    label = "chronocore"
    verbose_name = "Chrono"
    default_auto_field = "django.db.models.BigAutoField"
