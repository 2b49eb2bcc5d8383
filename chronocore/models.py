"""Tenancy: every job, execution and audit event belongs to exactly one tenant; API keys and
idempotency records are the tenant's side of the REST API, tenant memberships the admin's (which
signed-in users act for which tenant, :mod:`chronocore.staff`)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


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


API_KEY_PREFIX = "chrono"
API_KEY_PREFIX_HEX_CHARS = 12
API_KEY_SECRET_BYTES = 32


def hash_api_key(full_key: str) -> str:
    """SHA-256 of a whole API key, hex. The key carries 256 random bits, so a plain (fast) hash
    is as safe as a slow one and keeps authentication cheap on every request."""
    return hashlib.sha256(full_key.encode()).hexdigest()


def generate_api_key() -> tuple[str, str]:
    """A new ``(lookup prefix, full key)``; the full key is ``chrono_<prefix>_<secret>``."""
    lookup_prefix = secrets.token_hex(API_KEY_PREFIX_HEX_CHARS // 2)
    secret = secrets.token_urlsafe(API_KEY_SECRET_BYTES)
    return lookup_prefix, f"{API_KEY_PREFIX}_{lookup_prefix}_{secret}"


def split_api_key(full_key: str) -> tuple[str, str] | None:
    """``(lookup prefix, secret)`` of a ``chrono_<prefix>_<secret>`` key; None if malformed."""
    scheme, _, rest = full_key.partition("_")
    lookup_prefix, _, secret = rest.partition("_")
    if (
        scheme != API_KEY_PREFIX
        or len(lookup_prefix) != API_KEY_PREFIX_HEX_CHARS
        or not secret
        or any(c not in "0123456789abcdef" for c in lookup_prefix)
    ):
        return None
    return lookup_prefix, secret


class ApiKeyQuerySet(models.QuerySet):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)

    def issue(self, *, tenant: Tenant, name: str = "") -> tuple[ApiKey, str]:
        """Create a key for ``tenant``; returns it and the full key string, which is shown once
        and never stored (only its hash is)."""
        lookup_prefix, full_key = generate_api_key()
        api_key = self.create(
            tenant=tenant, name=name, prefix=lookup_prefix, key_hash=hash_api_key(full_key)
        )
        return api_key, full_key


class ApiKey(models.Model):
    """A tenant's credential for the REST API (``Authorization: Bearer chrono_<prefix>_…``).

    Only the SHA-256 of the key is stored; the key itself is shown once, when it is issued. The
    prefix (not secret) finds the row; revoking sets ``revoked_at`` and keeps the row for audit.
    """

    key_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True, default="")
    prefix = models.CharField(max_length=API_KEY_PREFIX_HEX_CHARS, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        db_table = "chrono_api_key"
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{API_KEY_PREFIX}_{self.prefix}_… ({self.name or self.tenant_id})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


class IdempotencyRecordQuerySet(models.QuerySet):
    def expired(self, *, older_than: timedelta) -> IdempotencyRecordQuerySet:
        return self.filter(created_at__lt=timezone.now() - older_than)


class IdempotencyRecord(models.Model):
    """The first response to a POST made with an ``Idempotency-Key`` header, per tenant.

    A retry with the same key and body gets this response again; a different body under the same
    key is refused. ``response_status`` is null while the first request is still running.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    request_fingerprint = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(default=timezone.now)

    objects = IdempotencyRecordQuerySet.as_manager()

    class Meta:
        db_table = "chrono_idempotency_record"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_tenant_key_uniq")
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.key}"


class TaskGrant(models.Model):
    """What one tenant may run: tasks matching ``task_pattern`` on queues matching
    ``queue_pattern``. A tenant with no grant runs nothing. Patterns are exact names or
    case-sensitive globs (``*`` any run of characters, dots included; ``?`` one character;
    ``[abc]`` one of them): see :mod:`chronocore.grants`."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="task_grants")
    task_pattern = models.CharField(max_length=200, help_text=(
        "A task name ('billing.tasks.charge') or a glob ('billing.*'; '*' is every task)."))
    queue_pattern = models.CharField(max_length=200, default="*", help_text=(
        "A queue name ('billing') or a glob; '*' (the default) is every queue."))
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "chrono_task_grant"
        ordering = ["tenant_id", "task_pattern", "queue_pattern"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "task_pattern", "queue_pattern"],
                                    name="task_grant_tenant_patterns_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.task_pattern} on {self.queue_pattern}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from chronocore.grants import pattern_problem

        errors = {name: problem for name in ("task_pattern", "queue_pattern")
                  if (problem := pattern_problem(getattr(self, name)))}
        if errors:
            raise ValidationError(errors)


class StaffRole(models.TextChoices):
    """What a tenant's staff user may do in the admin, each role including the one before."""

    VIEWER = "viewer", "viewer: reads the tenant's jobs, executions, runs and dashboard"
    OPERATOR = "operator", "operator: and pauses, resumes, runs, cancels, retries and deletes"
    ADMIN = "admin", "admin: and issues and revokes the tenant's API keys"


STAFF_ROLE_RANK = {StaffRole.VIEWER: 1, StaffRole.OPERATOR: 2, StaffRole.ADMIN: 3}


class TenantMembership(models.Model):
    """A user of the admin who works for one tenant, with a role there. A staff user with
    memberships sees those tenants' rows only; platform staff (superusers, or users holding the
    ``chronocore.platform_staff`` permission) see every tenant. A staff user with neither sees
    no tenant's rows (:mod:`chronocore.staff`)."""

    # No index of its own: the unique constraint's (user, tenant) starts with it.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="tenant_memberships", db_index=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=StaffRole.choices, default=StaffRole.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "chrono_tenant_membership"
        ordering = ["tenant_id", "user_id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="tenant_membership_uniq")
        ]
        # The constraint's index serves the look-up of a user's memberships (once per admin
        # request of a tenant's staff user); the tenant's foreign key keeps its own.
        permissions = [("platform_staff",
                        "Sees and acts on every tenant in the admin and the staff API")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.tenant_id} ({self.role})"
