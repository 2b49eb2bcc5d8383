"""Execution leases: a running attempt keeps its lease alive; cancellations reach it here.

Inside a worker process one :class:`LeaseKeeper` thread renews, every third of the lease, the
leases of the executions that process is running, in one statement, each guarded by its fencing
token. A renewal that matches nothing means the lease was lost (the reaper declared the attempt
lost): the keeper stops renewing it and the run's result will be refused.

The keeper also listens on the deployment's cancel channel (``chrono:db<N>:cancel``,
:mod:`scheduler.announcements`): when an execution it holds is cancelled, it raises
``SoftTimeLimitExceeded`` in the task (SIGUSR1, the signal Celery's pool uses for soft time
limits) and, if the task still runs ``cancel_grace_ms`` later, kills the process (SIGKILL); the
reaper then records the execution ``CANCELLED``. A cancellation whose announcement was missed is
seen at the next renewal.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import datetime

import redis
from django.db import DatabaseError, close_old_connections, connection

from chronocore.config import ChronoConfig
from chronocore.redis_client import connect, refresh_slots
from scheduler.announcements import Subscription
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.lifecycle import (
    LOCK_EXECUTIONS_IN_ORDER,
    LOCK_KEYED_EXECUTIONS_IN_ORDER,
    cancel_channel,
    key_range,
)

log = logging.getLogger("chrono.worker")


def renew_leases(held: Mapping[str, int], *, ttl_ms: int,
                 keys: Mapping[str, datetime] | None = None) -> tuple[set[str], set[str]]:
    """Extend the leases ``{execution id: fencing token}``; returns the ids still held and, of
    those, the ids whose cancellation was requested. ``keys`` gives the executions'
    ``scheduled_for`` (their partition key): the renewal of those touches their days alone,
    the others' names the id alone (a statement each kind)."""
    keys = keys or {}
    kept: set[str] = set()
    cancelled: set[str] = set()
    with connection.cursor() as cursor:
        for keyed in (True, False):
            ids = [i for i in held if (i in keys) is keyed]
            if not ids:
                continue
            if keyed:
                first, last = key_range(keys[i] for i in ids)
                cursor.execute(_RENEW_KEYED_SQL, [
                    [uuid.UUID(i) for i in ids], [held[i] for i in ids], [keys[i] for i in ids],
                    first, last, ms_to_datetime(now_ms() + ttl_ms), first, last])
            else:
                cursor.execute(_RENEW_SQL, [
                    [uuid.UUID(i) for i in ids], ms_to_datetime(now_ms() + ttl_ms),
                    [uuid.UUID(i) for i in ids], [held[i] for i in ids]])
            for execution_id, cancel_requested_at in cursor.fetchall():
                kept.add(str(execution_id))
                if cancel_requested_at is not None:
                    cancelled.add(str(execution_id))
    return kept, cancelled


_RENEW_SQL = (
    f"WITH l AS ({LOCK_EXECUTIONS_IN_ORDER.format(ids='%s')}) "
    # nosec B608 # LOCK_EXECUTIONS_IN_ORDER is a module constant
    "UPDATE chrono_execution AS e SET lease_expires_at = %s "
    "FROM unnest(%s::uuid[], %s::bigint[]) AS x(execution_id, fencing_token) "
    "JOIN l USING (execution_id) "
    "WHERE e.execution_id = x.execution_id AND e.fencing_token = x.fencing_token "
    "AND e.status = 'RUNNING' RETURNING e.execution_id, e.cancel_requested_at"
)
_RENEW_KEYED_SQL = (
    "WITH x AS (SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::timestamptz[]) "
    "AS x(execution_id, fencing_token, scheduled_for)), "
    # nosec B608 # LOCK_KEYED_EXECUTIONS_IN_ORDER is a module constant
    f"l AS ({LOCK_KEYED_EXECUTIONS_IN_ORDER.format(keys='x', first='%s', last='%s')}) "
    "UPDATE chrono_execution AS e SET lease_expires_at = %s "
    "FROM x JOIN l USING (execution_id, scheduled_for) "
    "WHERE e.execution_id = x.execution_id AND e.scheduled_for = x.scheduled_for "
    "AND e.scheduled_for BETWEEN %s::timestamptz AND %s::timestamptz "
    "AND e.fencing_token = x.fencing_token "
    "AND e.status = 'RUNNING' RETURNING e.execution_id, e.cancel_requested_at"
)


class LeaseKeeper(threading.Thread):
    """One per worker process, started on first use (after the pool forked)."""

    def __init__(self, *, ttl_ms: int, cancel_grace_ms: int, redis_url: str,
                 redis_cluster: bool = False) -> None:
        super().__init__(name="chrono-lease-keeper", daemon=True)
        self.ttl_ms = ttl_ms
        self.cancel_grace_ms = cancel_grace_ms
        self.redis_url = redis_url
        self.redis_cluster = redis_cluster
        self._held: dict[str, int] = {}
        self._keys: dict[str, datetime] = {}
        self._cancelling: dict[str, float] = {}
        self._lock = threading.Lock()

    def hold(self, execution_id: str, fencing_token: int,
             scheduled_for: datetime | None = None) -> None:
        """Renew ``execution_id``'s lease while it runs (``scheduled_for``: its partition
        key, which its renewals name)."""
        with self._lock:
            self._held[execution_id] = fencing_token
            if scheduled_for is not None:
                self._keys[execution_id] = scheduled_for

    def release(self, execution_id: str) -> None:
        with self._lock:
            self._held.pop(execution_id, None)
            self._keys.pop(execution_id, None)
            self._cancelling.pop(execution_id, None)

    def run(self) -> None:
        client = subscription = None
        next_renewal = time.monotonic() + self.ttl_ms / 3000
        while True:
            try:
                if client is None:
                    client = connect(self.redis_url, cluster=self.redis_cluster)
                if subscription is None:
                    subscription = Subscription(client, cancel_channel(client))
                data = subscription.get(timeout_s=0.5)
                if data is not None:
                    self._cancel([i for i in data.decode().splitlines()])
            except redis.RedisError as exc:
                log.error("cancel listener lost Redis (renewals still see cancellations): %r",
                          exc)
                if subscription is not None:
                    subscription.close()
                    subscription = None
                if client is not None:
                    refresh_slots(client)
                time.sleep(1)
            self._force_overdue()
            if time.monotonic() >= next_renewal:
                next_renewal = time.monotonic() + self.ttl_ms / 3000
                self._renew()

    def _renew(self) -> None:
        with self._lock:
            held = dict(self._held)
            keys = dict(self._keys)
        if not held:
            return
        try:
            kept, cancelled = renew_leases(held, ttl_ms=self.ttl_ms, keys=keys)
        except DatabaseError as exc:
            log.error("renewing %d execution leases failed, retrying: %r", len(held), exc)
            close_old_connections()
            return
        for execution_id in held.keys() - kept:
            log.warning("lease of execution %s was lost: its result will be refused",
                        execution_id)
            self.release(execution_id)
        self._cancel(sorted(cancelled))

    def _cancel(self, execution_ids: list[str]) -> None:
        with self._lock:
            mine = [i for i in execution_ids if i in self._held and i not in self._cancelling]
            for execution_id in mine:
                self._cancelling[execution_id] = time.monotonic()
        for execution_id in mine:
            log.warning("execution %s cancelled: stopping it", execution_id)
            os.kill(os.getpid(), signal.SIGUSR1)

    def _force_overdue(self) -> None:
        with self._lock:
            overdue = [i for i, at in self._cancelling.items()
                       if time.monotonic() - at > self.cancel_grace_ms / 1000]
        if overdue:
            log.error("executions %s ignored their cancellation for %d ms: killing the process",
                      overdue, self.cancel_grace_ms)
            os.kill(os.getpid(), signal.SIGKILL)


_keeper: LeaseKeeper | None = None
_keeper_lock = threading.Lock()


def lease_keeper(config: ChronoConfig) -> LeaseKeeper:
    """This process's keeper, started with ``config``'s settings the first time (a forked
    child gets its own: the thread does not survive fork)."""
    global _keeper
    with _keeper_lock:
        if _keeper is None or not _keeper.is_alive():
            _keeper = LeaseKeeper(ttl_ms=config.execution_lease_ttl_ms,
                                  cancel_grace_ms=config.cancel_grace_ms,
                                  redis_url=config.redis_url,
                                  redis_cluster=config.redis_cluster)
            _keeper.start()
        return _keeper
