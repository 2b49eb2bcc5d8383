"""Request rate per tenant (or per staff user), shared by every web process through Redis.

A GCRA limiter (:mod:`.gcra`): ``api_rate_per_minute`` requests a minute, with up to a minute's
allowance in one burst. A refused request gets 429 with ``Retry-After`` in seconds. Callers
without credentials, and failed authentications, are limited by client address instead
(:mod:`.client_limits`).
"""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

# get_config() here: DRF builds a throttle per request: nothing owns it to hand it the
# configuration, so it reads the process's (the edge).
from chronocore.config import get_config
from chronocore.rest import gcra
from chronocore.rest.authentication import TenantClient

KEY_PREFIX = gcra.KEY_PREFIX


def rate_limit_key(request: Request) -> str | None:
    user = request.user
    if isinstance(user, TenantClient):
        return f"{KEY_PREFIX}tenant:{user.tenant.tenant_id}"
    if user is not None and user.is_authenticated:
        return f"{KEY_PREFIX}user:{user.pk}"
    return None


class TenantRateThrottle(BaseThrottle):
    """Refuses a request once its tenant (or staff user) is over ``api_rate_per_minute``."""

    def __init__(self) -> None:
        self.wait_s: float | None = None

    def allow_request(self, request: Request, view: object) -> bool:
        key = rate_limit_key(request)
        if key is None:
            return True
        self.wait_s = gcra.take(key, get_config().api_rate_per_minute)
        return self.wait_s is None

    def wait(self) -> float | None:
        return self.wait_s
