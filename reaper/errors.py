"""The exception family of the reaper package: every error it raises is a ReaperError.

The reaper raises none of its own today. What fails during a pass (PostgreSQL, Redis, RabbitMQ:
``DatabaseError``, ``redis.RedisError``, :class:`scheduler.errors.DispatchError` and
:class:`scheduler.errors.BrokerUnavailable`) is logged by the loop and the pass tried again with
back-off (:class:`reaper.reaper.Reaper`); an error of the reaper's own belongs under this base.
"""

from __future__ import annotations


class ReaperError(Exception):
    """Base class of every error the reaper package raises."""
