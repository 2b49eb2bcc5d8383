"""The chronoadmin Django app: tenancy, the admin site, the ``chrono`` command."""

from __future__ import annotations

from django.apps import AppConfig


class ChronoAdminConfig(AppConfig):
    name = "chronoadmin"
    verbose_name = "Chrono"
    default_auto_field = "django.db.models.BigAutoField"
