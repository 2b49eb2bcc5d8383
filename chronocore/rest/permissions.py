"""Who may call what: tenant endpoints take a tenant API key, platform endpoints a staff user."""

from __future__ import annotations

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from chronocore.models import Tenant
from chronocore.rest.authentication import TenantClient
from chronocore.staff import is_platform_staff


def tenant_of(request: Request) -> Tenant | None:
    """The tenant a request acts for, or None when it is not made with a tenant API key."""
    user = request.user
    return user.tenant if isinstance(user, TenantClient) else None


class IsTenantClient(BasePermission):
    """Jobs and executions belong to a tenant, so only a tenant API key reaches them."""

    message = (
        "This endpoint acts for one tenant: authenticate with the tenant's API key "
        "('Authorization: Bearer chrono_<prefix>_<secret>')."
    )

    def has_permission(self, request: Request, view: object) -> bool:
        return tenant_of(request) is not None


class IsPlatformAdmin(BasePermission):
    """Tenants, API keys and workers span tenants: platform staff of the admin site only
    (superusers and holders of ``chronocore.platform_staff``; a tenant's staff are not)."""

    message = ("Only platform staff (superusers, or staff users with the "
               "chronocore.platform_staff permission, signed in to /admin/) may use this.")

    def has_permission(self, request: Request, view: object) -> bool:
        user = request.user
        return not isinstance(user, TenantClient) and is_platform_staff(user)
