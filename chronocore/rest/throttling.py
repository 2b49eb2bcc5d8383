"""Request rate per tenant (or per staff user), shared by every web process through Redis.

A GCRA limiter (``lua/rate_limit.lua``): ``api_rate_per_minute`` requests a minute, with up to a
minute's allowance in one burst. A refused request gets 429 with ``Retry-After`` in seconds.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import redis
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from chronocore.config import get_config
from chronocore.redis_client import redis_client
from chronocore.rest.authentication import TenantClient

_SCRIPT = Path(__file__).with_name("lua") / "rate_limit.lua"
KEY_PREFIX = "chrono:api:rate:"


def api_redis() -> redis.Redis:
    """The Redis connection pool of this process (the timer store's: one pool, one server)."""
    return redis_client()


@cache
def _rate_limit_script(client: redis.Redis):
    return client.register_script(_SCRIPT.read_text())


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
        rate = get_config().api_rate_per_minute
        interval_ms = 60_000 / rate
        client = api_redis()
        allowed, wait_ms = _rate_limit_script(client)(
            keys=[key], args=[interval_ms, interval_ms * rate], client=client
        )
        if allowed:
            return True
        self.wait_s = max(1, math.ceil(int(wait_ms) / 1000))
        return False

    def wait(self) -> float | None:
        return self.wait_s
