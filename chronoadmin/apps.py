"""The chronoadmin Django app: the top of Chrono (admin site and dashboard, REST API, the
``chrono`` command). Tenancy's models live below it, in :mod:`chronocore`."""

from __future__ import annotations

from django.apps import AppConfig


class ChronoAdminConfig(AppConfig):
    name = "chronoadmin"
    verbose_name = "Chrono"
    default_auto_field = "django.db.models.BigAutoField"
