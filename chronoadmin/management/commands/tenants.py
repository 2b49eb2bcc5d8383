"""``chrono tenants create|list|disable|enable``: the platform's tenants (docs/cli.md)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction

from chronoadmin.api.serializers import TenantSerializer
from chronoadmin.operator_cli import (
    Conflict,
    Invalid,
    Listing,
    OperatorCommand,
    tenant_by_slug,
)
from chronocore.models import Tenant

COLUMNS = ("slug", "name", "is_active", "tenant_id", "created_at")


class Command(OperatorCommand):
    help = ("Create, list, disable or enable tenants. A new tenant may run nothing until "
            "granted (chrono grants add); a disabled one's API keys stop working.")
    actions = {
        "create": "create a tenant",
        "list": "list every tenant",
        "disable": "disable a tenant: its API keys are refused and nothing new is scheduled",
        "enable": "enable a disabled tenant again",
    }

    def add_action_arguments(self, name, parser):
        if name == "create":
            parser.add_argument("slug", help="letters, digits, - and _ (at most 64)")
            parser.add_argument("--name", default=None, help="display name (default: the slug)")
        elif name in ("disable", "enable"):
            parser.add_argument("slug")

    def action_create(self, *, slug: str, name: str | None, **_):
        try:
            validate_slug(slug)
        except ValidationError:
            raise Invalid(f"slug {slug!r} is not valid: use letters, digits, - and _") from None
        if len(slug) > Tenant._meta.get_field("slug").max_length:
            raise Invalid(f"slug {slug!r} is longer than 64 characters")
        try:
            with transaction.atomic():
                tenant = Tenant.objects.create(slug=slug, name=name or slug)
        except IntegrityError:
            raise Conflict(f"a tenant with the slug {slug!r} already exists") from None
        return TenantSerializer(tenant).data

    def action_list(self, **_):
        return Listing([TenantSerializer(t).data for t in Tenant.objects.order_by("slug")],
                       COLUMNS)

    def action_disable(self, *, slug: str, **_):
        return self._set_active(slug, False)

    def action_enable(self, *, slug: str, **_):
        return self._set_active(slug, True)

    def _set_active(self, slug: str, active: bool):
        tenant = tenant_by_slug(slug)
        if not Tenant.objects.filter(pk=tenant.pk, is_active=not active).update(
                is_active=active):
            raise Conflict(f"tenant {tenant.slug} is already "
                           f"{'enabled' if active else 'disabled'}")
        tenant.refresh_from_db()
        return TenantSerializer(tenant).data
