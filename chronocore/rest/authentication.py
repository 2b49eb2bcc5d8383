"""Tenant API keys: ``Authorization: Bearer chrono_<prefix>_<secret>``.

The prefix finds the key's row; the SHA-256 of the whole key is compared in constant time. A
request authenticated this way has a :class:`TenantClient` as ``request.user`` and the
:class:`~chronocore.models.ApiKey` as ``request.auth``. Staff users of the admin site use
DRF's session authentication instead (platform endpoints only).

Every failed authentication counts against the caller's address, and an address over its budget
is refused with 429 before its key is looked at (:mod:`chronocore.rest.client_limits`).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from chronocore.models import ApiKey, Tenant, hash_api_key, split_api_key
from chronocore.rest import client_limits

# last_used_at is written at most this often per key, so authentication is not a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
_HINT = "send 'Authorization: Bearer chrono_<prefix>_<secret>' with a key issued for your tenant"


@dataclass(frozen=True)
class TenantClient:
    """The caller of a request made with a tenant API key (DRF's ``request.user``)."""

    tenant: Tenant
    api_key: ApiKey = field(repr=False)
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_active: bool = True
    is_staff: bool = False
    is_superuser: bool = False

    @property
    def pk(self) -> str:
        return f"tenant:{self.tenant.tenant_id}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Authenticates ``Authorization: Bearer …`` with a tenant API key; 401 when it is not one."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TenantClient, ApiKey] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        client_limits.refuse_if_failing(request)
        try:
            return self._authenticate_header(header)
        except exceptions.AuthenticationFailed:
            client_limits.count_failure(request)
            raise

    def _authenticate_header(self, header: list[bytes]) -> tuple[TenantClient, ApiKey]:
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(f"Malformed Authorization header: {_HINT}.")
        try:
            full_key = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(f"Invalid API key: {_HINT}.") from None
        return self.authenticate_key(full_key)

    def authenticate_key(self, full_key: str) -> tuple[TenantClient, ApiKey]:
        parts = split_api_key(full_key)
        if parts is None:
            raise exceptions.AuthenticationFailed(f"Invalid API key: {_HINT}.")
        api_key = ApiKey.objects.select_related("tenant").filter(prefix=parts[0]).first()
        if api_key is None or not hmac.compare_digest(api_key.key_hash, hash_api_key(full_key)):
            raise exceptions.AuthenticationFailed(f"Invalid API key: {_HINT}.")
        if api_key.is_revoked:
            raise exceptions.AuthenticationFailed(
                "This API key was revoked; ask a platform administrator for a new one."
            )
        if not api_key.tenant.is_active:
            raise exceptions.AuthenticationFailed("This API key's tenant is disabled.")
        _touch(api_key)
        return TenantClient(tenant=api_key.tenant, api_key=api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="chrono"'


def _touch(api_key: ApiKey) -> None:
    now = timezone.now()
    if api_key.last_used_at is not None and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now
