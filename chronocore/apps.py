"""The chronocore Django app: tenancy's models (tenants, API keys, task grants, idempotency
records)."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class ChronoCoreConfig(AppConfig):
    name = "chronocore"
    label = "chronocore"
    verbose_name = "Chrono"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from chronocore.grants import forget_grant_of
        from chronocore.models import TaskGrant

        post_save.connect(forget_grant_of, sender=TaskGrant, dispatch_uid="chrono-grant-saved")
        post_delete.connect(forget_grant_of, sender=TaskGrant,
                            dispatch_uid="chrono-grant-deleted")
