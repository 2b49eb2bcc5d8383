"""Tenancy: every job, execution and audit event belongs to exactly one tenant."""

from __future__ import annotations

import uuid

from django.db import models


class Tenant(models.Model):
    """An enterprise account. Its id scopes every query Chrono makes on its behalf."""

    tenant_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "chrono_tenant"
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug
