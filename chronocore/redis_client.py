"""This process's Redis client: one connection pool to ``redis_url``, shared by whatever needs it.

The timer store (:func:`scheduler.timers.timer_store`) is built on it, and so are the API's rate
limit and pending-job quota: one pool, one server.
"""

from __future__ import annotations

from functools import cache

import redis

# get_config() here: the process's one Redis pool, made on first use by whatever needs it first:
# the process edge, nothing owns it to hand it a configuration.
from chronocore.config import get_config


@cache
def redis_client() -> redis.Redis:
    """This process's client (made on first use; ``redis_client.cache_clear()`` drops it)."""
    return redis.Redis.from_url(get_config().redis_url)
