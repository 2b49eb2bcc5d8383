"""The chronoadmin Django app: the top of Chrono (admin site and dashboard, REST API, the
``chrono`` command). Tenancy's models live below it, in :mod:`chronocore`."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class ChronoAdminConfig(AppConfig):
    name = "chronoadmin"
    verbose_name = "Chrono"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from chronoadmin.checks import SERVICES_TAG, check_services

        checks.register(check_services, SERVICES_TAG)
