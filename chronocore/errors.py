"""The exception family of ``chronocore``: every error the ground floor raises is a ChronoCoreError.

Each class keeps the built-in base a caller would reach for (``ValueError`` for a bad value,
``OSError`` for a port), so code that catches those goes on catching them.
"""

from __future__ import annotations

import redis


class ChronoCoreError(Exception):
    """Base class of every error ``chronocore`` raises."""


class ConfigError(ChronoCoreError, ValueError):
    """Raised when an environment variable holds a value Chrono cannot use, or two settings
    that cannot hold together; says which and why."""


class CredentialsError(ChronoCoreError, ValueError):
    """Raised when the credentials file exists but cannot be read or parsed; names the file."""


class InvalidGrant(ChronoCoreError, ValueError):
    """Raised when a grant's pattern is unusable; ``field`` is ``task`` or ``queue``."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ProbeError(ChronoCoreError, OSError):
    """Raised when the probe port cannot be opened (in use, not allowed); names the port."""


class RedisUnavailable(ChronoCoreError, redis.ConnectionError):
    """Raised when redis-py's cluster client cannot reach the cluster (no node of ``REDIS_URL``
    answers, or the nodes it reached do not serve every slot): its ``RedisClusterException``
    is no ``redis.RedisError``, which every loop and view of Chrono handles as an outage."""
