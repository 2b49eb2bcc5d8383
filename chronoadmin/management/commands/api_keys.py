"""``chrono api-keys issue|list|revoke --tenant SLUG``: a tenant's REST API keys
(docs/cli.md). A key is shown once, when issued; only its hash is stored."""

from __future__ import annotations

import uuid

from django.utils import timezone

from chronoadmin.api.serializers import ApiKeySerializer
from chronoadmin.operator_cli import (
    Conflict,
    Listing,
    NotFound,
    OperatorCommand,
    add_tenant_argument,
    tenant_by_slug,
)
from chronocore.models import ApiKey, split_api_key

COLUMNS = ("prefix", "name", "created_at", "last_used_at", "revoked_at", "key_id")


class Command(OperatorCommand):
    help = "Issue, list or revoke a tenant's API keys."
    actions = {
        "issue": "issue a key (printed once: store it now)",
        "list": "list the tenant's keys (revoked ones with --all)",
        "revoke": "revoke a key by its prefix, id or whole value (kept for audit)",
    }

    def add_action_arguments(self, name, parser):
        add_tenant_argument(parser)
        if name == "issue":
            parser.add_argument("--name", default="", help="what the key is for")
        elif name == "list":
            parser.add_argument("--all", action="store_true", dest="include_revoked",
                                help="include revoked keys")
        elif name == "revoke":
            parser.add_argument("key", metavar="KEY", help="the key's prefix, id or value")

    def action_issue(self, *, tenant: str, name: str, **_):
        api_key, full_key = ApiKey.objects.issue(tenant=tenant_by_slug(tenant), name=name)
        return dict(ApiKeySerializer(api_key).data) | {"key": full_key}

    def action_list(self, *, tenant: str, include_revoked: bool, **_):
        keys = ApiKey.objects.filter(tenant=tenant_by_slug(tenant))
        if not include_revoked:
            keys = keys.active()
        return Listing([ApiKeySerializer(k).data for k in keys], COLUMNS)

    def action_revoke(self, *, tenant: str, key: str, **_):
        owner = tenant_by_slug(tenant)
        api_key = _key_of(owner, key)
        if not ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
                revoked_at=timezone.now()):
            raise Conflict(f"key {api_key.prefix} was already revoked at {api_key.revoked_at}")
        api_key.refresh_from_db()
        return ApiKeySerializer(api_key).data


def _key_of(tenant, text: str) -> ApiKey:
    """The tenant's key named by its prefix, its id or its whole value; NotFound otherwise
    (another tenant's key included)."""
    keys = ApiKey.objects.filter(tenant=tenant)
    parts = split_api_key(text)
    prefix = parts[0] if parts else text
    found = keys.filter(prefix=prefix).first()
    if found is None:
        try:
            found = keys.filter(key_id=uuid.UUID(text)).first()
        except ValueError:  # not an id either
            found = None
    if found is None:
        raise NotFound(f"tenant {tenant.slug} has no API key {text[:24]!r}; see chrono api-keys "
                       f"list --tenant {tenant.slug} --all")
    return found
