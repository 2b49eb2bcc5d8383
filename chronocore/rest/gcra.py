"""The API's rate limiter: GCRA (``lua/rate_limit.lua``) over this process's Redis pool, so
every web process shares each budget. Each budget is ``rate_per_minute`` requests a minute with
up to a minute's allowance in one burst. The per-tenant throttle (:mod:`.throttling`) and the
limits by client address (:mod:`.client_limits`) are built on it.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

from chronocore.redis_client import RedisClient, redis_client, register_script

_SCRIPT = Path(__file__).with_name("lua") / "rate_limit.lua"
KEY_PREFIX = "chrono:api:rate:"


def api_redis() -> RedisClient:
    """The Redis connection pool of this process (the timer store's: one pool, one server)."""
    return redis_client()


@cache
def _rate_limit_script(client: RedisClient):
    return register_script(client, _SCRIPT.read_text())


def _run(key: str, rate_per_minute: int, *, count: bool) -> int | None:
    interval_ms = 60_000 / rate_per_minute
    client = api_redis()
    allowed, wait_ms = _rate_limit_script(client)(
        keys=[key], args=[interval_ms, interval_ms * rate_per_minute, 1 if count else 0],
        client=client,
    )
    return None if allowed else max(1, math.ceil(int(wait_ms) / 1000))


def take(key: str, rate_per_minute: int) -> int | None:
    """Count one request against ``key``'s budget. None when it was within it; otherwise the
    whole seconds (at least 1) until one more would be, and nothing is counted."""
    return _run(key, rate_per_minute, count=True)


def peek(key: str, rate_per_minute: int) -> int | None:
    """As :func:`take`, without counting: would one more request be within the budget?"""
    return _run(key, rate_per_minute, count=False)
