"""The dashboard's all-tenants view from a snapshot: its figures computed every
``dashboard_snapshot_interval_ms`` by one reaper process, kept in Redis, and served by the view
with their age.

Why: the all-tenants figures (the task tables and charts over the platform's rollup rows of
the last hour, 12,000 for 200 tasks; 256 shards' ``ZCARD``; the workers; stuck work; RabbitMQ's
queues) took 24-36 ms of the web process's and PostgreSQL's time, three to five times that
under load, once per web process and per second of its cache, and they are the same for every
platform operator. Computed once for the whole platform every 2 s, a request reads one key.

Where: one Redis key, :data:`SNAPSHOT_KEY`, holding the JSON, rather than a PostgreSQL row:
the snapshot is derived and disposable (losing it costs one live computation, as without it),
and it is read on every poll of every platform operator; a ``GET`` takes nothing from the
database the platform's work loads, and no row is rewritten, and vacuumed, every 2 s. It
expires on its own (:data:`SNAPSHOT_TTL_MS`) when no reaper writes it any more.

Who: a thread of each ``chrono reaper`` (:class:`DashboardSnapshotter`), not its pass loop, so
that a long pass (a retention pass, a wave of lost executions) does not age the snapshot and
the queue panel's wait for RabbitMQ never delays reaping. Several reapers may run: each
interval the one whose ``SET NX PX`` of :data:`TURN_KEY` succeeds computes, the others skip
their turn (counted); a reaper killed while computing leaves the turn to expire.

Cost, bounded: the queries are the live view's, each under :data:`STATEMENT_TIMEOUT_MS`; the
next computation starts ``max(interval, d / MAX_CPU_SHARE)`` after one that took ``d`` seconds
started, so the snapshot takes at most :data:`MAX_CPU_SHARE` of the time of the process
computing it however slow the figures get (the view then falls back to live, saying so, once
the snapshot ages past its bound). Every computation is logged at debug with its duration and
size; the reaper's ``/metrics`` count them (:class:`SnapshotCollector`).

Reading (:func:`read_snapshot`): the view serves a snapshot younger than
``dashboard_snapshot_max_age_ms``; a missing, older or unreadable one is reported with the
reason, and the view computes the figures itself (:mod:`chronoadmin.dashboard`).

Tenants' views: each request for one notes the tenant in :data:`VIEWED_KEY` (a sorted set, by
time) as it reads the tenant's snapshot, in one round trip; each turn the snapshotter also
computes the figures of the tenants viewed in the last :data:`VIEWED_FOR_MS` (at most
:data:`MAX_TENANT_SNAPSHOTS`; about 5 ms each) into one key per tenant, under its id
(:func:`tenant_snapshot_key`), forgetting the others. So a tenant's page, polling every 2 s,
reads a key, as the platform's does, while no snapshot is computed for a tenant nobody looks
at; a tenant's first view, before the next turn, is computed live and says so. Why not
compute each tenant's figures per request: on two cores running 1,000 jobs/s, the request's
round trips to PostgreSQL wait for the machine's busy cores (p95 104-118 ms for 5 ms of work
with 10 M executions, ``chrono bench dashboard``), where reading a snapshot does not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import redis
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from chronoadmin.dashboard_data import dashboard_data
from chronocore.redis_client import RedisClient
from scheduler.clock import datetime_to_ms

# One hash tag: the two keys live on one node of a Redis Cluster (they are never used in one
# command; the tag only keeps them together).
SNAPSHOT_KEY = "{chrono:dashboard}:platform"
TURN_KEY = "{chrono:dashboard}:turn"
# Tenants' views: a sorted set of the tenants whose view was asked for (score: when, epoch
# ms), and one snapshot per tenant viewed in the last VIEWED_FOR_MS, under its id.
VIEWED_KEY = "{chrono:dashboard}:viewed"
TENANT_SNAPSHOT_PREFIX = "{chrono:dashboard}:tenant:"
VIEWED_FOR_MS = 60_000
MAX_TENANT_SNAPSHOTS = 50
SNAPSHOT_TTL_MS = 120_000
STATEMENT_TIMEOUT_MS = 5_000
MAX_CPU_SHARE = 0.1
MAX_BACKOFF_S = 10.0

log = logging.getLogger("chrono.reaper.dashboard")


@dataclass(frozen=True)
class Reading:
    """What :func:`read_snapshot` found: the figures and their time when the snapshot is
    fresh, else ``data`` None and the reason (``as_of_ms`` of a stale one kept)."""

    data: dict | None
    as_of_ms: int | None
    reason: str | None = None


def tenant_snapshot_key(tenant_id: str) -> str:
    """The key of one tenant's snapshot: its id (the one the view's scope check gave), never
    a slug from a request."""
    return TENANT_SNAPSHOT_PREFIX + tenant_id


def write_snapshot(client: RedisClient, data: dict, *, as_of_ms: int,
                   key: str = SNAPSHOT_KEY) -> int:
    """Store ``data``, the figures as of ``as_of_ms``; returns the snapshot's size in bytes."""
    body = orjson.dumps({"as_of_ms": as_of_ms, "data": data})
    client.set(key, body, px=SNAPSHOT_TTL_MS)
    return len(body)


def read_snapshot(client: RedisClient, *, now_ms: int, max_age_ms: int,
                  interval_ms: int, tenant_id: str | None = None) -> Reading:
    """The platform's snapshot (or ``tenant_id``'s) if it is younger than ``max_age_ms``, else
    why not (``interval_ms`` 0: the reapers are told to write none). Reading a tenant's notes
    that it was viewed (:data:`VIEWED_KEY`, in the same round trip), so that the reapers
    compute its snapshot from their next turn on."""
    if interval_ms == 0:
        return Reading(None, None, "the reapers write no snapshot "
                                   "(CHRONO_DASHBOARD_SNAPSHOT_INTERVAL_MS=0)")
    try:
        if tenant_id is None:
            body = client.get(SNAPSHOT_KEY)
        else:
            pipeline = client.pipeline(transaction=False)
            pipeline.zadd(VIEWED_KEY, {tenant_id: now_ms})
            pipeline.get(tenant_snapshot_key(tenant_id))
            body = pipeline.execute()[1]
    except redis.RedisError as exc:
        return Reading(None, None, f"the snapshot could not be read from Redis: {exc}")
    if body is None and tenant_id is not None:
        return Reading(None, None, "no snapshot of this tenant yet: the reapers compute one "
                                   "every few seconds for the tenants viewed in the last "
                                   f"{VIEWED_FOR_MS // 1000} s (is `chrono reaper` running?)")
    if body is None:
        return Reading(None, None, "no snapshot: no reaper has written one in the last "
                                   f"{SNAPSHOT_TTL_MS // 1000} s (is `chrono reaper` running?)")
    try:
        snapshot = orjson.loads(body)
        age_ms = now_ms - snapshot["as_of_ms"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        return Reading(None, None, f"the snapshot in Redis is unreadable: {exc!r}")
    if age_ms > max_age_ms:
        return Reading(None, snapshot["as_of_ms"],
                       f"the snapshot is {age_ms / 1000:.1f} s old, older than "
                       f"{max_age_ms / 1000:g} s (is `chrono reaper` running?)")
    return Reading(snapshot["data"], snapshot["as_of_ms"])


@dataclass
class SnapshotCounters:
    written: int = 0
    # Turns another process had (several reapers run): nothing computed.
    skipped: int = 0
    failed: int = 0
    seconds: float = 0.0
    last_seconds: float = 0.0
    last_bytes: int = 0
    # Tenants' snapshots written with the platform's.
    tenants: int = 0


class DashboardSnapshotter:
    """Computes the all-tenants figures into the snapshot every ``interval_ms`` when it is
    this process's turn; ``start()`` runs it on a daemon thread until ``stop()``."""

    def __init__(self, *, client: RedisClient, interval_ms: int, heartbeat_interval_s: float,
                 owner: str, compute: Callable[..., dict] = dashboard_data) -> None:
        if interval_ms <= 0:
            raise ValueError("interval_ms must be positive (0 turns the snapshot off: start "
                             "no snapshotter)")
        self.client = client
        self.interval_ms = interval_ms
        self.heartbeat_interval_s = heartbeat_interval_s
        self.owner = owner
        self._compute = compute
        self.counters = SnapshotCounters()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="chrono-dashboard-snapshot",
                                        daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        backoff_s = 0.5
        try:
            while not self._stopping.is_set():
                try:
                    wait_s = self.run_once()
                    backoff_s = 0.5
                # Any error: the figures' code is the dashboard's, and a bug there must cost
                # a log line and the snapshot's freshness (the view falls back to live,
                # saying so), never this thread for the rest of the reaper's life.
                except Exception as exc:
                    self.counters.failed += 1
                    if isinstance(exc, (DatabaseError, redis.RedisError, OSError)):
                        log.error("dashboard snapshot failed, retrying in %.1f s: %r",
                                  backoff_s, exc)
                    else:
                        log.exception("dashboard snapshot failed, retrying in %.1f s",
                                      backoff_s)
                    close_old_connections()
                    wait_s = backoff_s
                    backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
                self._stopping.wait(wait_s)
        finally:
            connection.close()

    def _viewed_tenants(self, now_ms: int) -> list[str]:
        """The tenants viewed in the last :data:`VIEWED_FOR_MS` (the latest
        :data:`MAX_TENANT_SNAPSHOTS`); those viewed before are forgotten."""
        pipeline = self.client.pipeline(transaction=False)
        pipeline.zremrangebyscore(VIEWED_KEY, "-inf", now_ms - VIEWED_FOR_MS)
        pipeline.zrevrange(VIEWED_KEY, 0, MAX_TENANT_SNAPSHOTS - 1)
        return [tenant_id.decode() for tenant_id in pipeline.execute()[1]]

    def run_once(self) -> float:
        """Compute and write the snapshot if this is our turn; returns the seconds until the
        next try."""
        # Taken for as long as a computation may last (its statements' timeout), so that no
        # other reaper starts one meanwhile; a reaper killed while computing delays the next
        # snapshot by that much at most (the view serves live meanwhile, saying so).
        if not self.client.set(TURN_KEY, self.owner, nx=True,
                               px=self.interval_ms + STATEMENT_TIMEOUT_MS):
            self.counters.skipped += 1
            return self.interval_ms / 1000
        started = time.perf_counter()
        now = timezone.now()
        with transaction.atomic(), connection.cursor() as cursor:
            # Read-only figures: a statement that takes this long is a sick database, and the
            # snapshot waits for a later turn rather than holding a connection.
            cursor.execute("SET LOCAL statement_timeout = %s", [STATEMENT_TIMEOUT_MS])
            data = self._compute(tenant_id=None, heartbeat_interval_s=self.heartbeat_interval_s,
                                 now=now)
            tenants = self._viewed_tenants(datetime_to_ms(now))
            figures = {tenant_id: self._compute(
                tenant_id=tenant_id, heartbeat_interval_s=self.heartbeat_interval_s, now=now)
                for tenant_id in tenants}
        data["tenant"] = None
        size = write_snapshot(self.client, data, as_of_ms=datetime_to_ms(now))
        for tenant_id, tenant_data in figures.items():
            size += write_snapshot(self.client, tenant_data, as_of_ms=datetime_to_ms(now),
                                   key=tenant_snapshot_key(tenant_id))
        took_s = time.perf_counter() - started
        # The next computation, here or in another reaper, starts an interval after this one
        # started, or 1 / MAX_CPU_SHARE times its duration when that is longer.
        hold_ms = max(1, int(max(self.interval_ms, took_s * 1000 / MAX_CPU_SHARE)
                             - took_s * 1000))
        self.client.set(TURN_KEY, self.owner, px=hold_ms)
        counters = self.counters
        counters.written += 1
        counters.tenants += len(figures)
        counters.seconds += took_s
        counters.last_seconds = took_s
        counters.last_bytes = size
        log.debug("dashboard snapshot written in %.1f ms (%d bytes); next in %.1f s",
                  took_s * 1000, size, hold_ms / 1000)
        return hold_ms / 1000


class SnapshotCollector:
    """The snapshotter's counters as Prometheus series (read when scraped: the thread pays
    nothing for them). ``rate(chrono_reaper_dashboard_snapshot_seconds_total[5m])`` is the
    share of one core the snapshot costs."""

    def __init__(self, snapshotter: DashboardSnapshotter) -> None:
        self.snapshotter = snapshotter

    def collect(self):
        counters = self.snapshotter.counters
        for name, documentation, value in (
            ("chrono_reaper_dashboard_snapshots",
             "Dashboard snapshots (the all-tenants figures) this reaper computed and wrote.",
             counters.written),
            ("chrono_reaper_dashboard_tenant_snapshots",
             "Tenants' dashboard snapshots (of the tenants viewed lately) this reaper wrote.",
             counters.tenants),
            ("chrono_reaper_dashboard_snapshot_turns_skipped",
             "Snapshot turns another reaper had (nothing computed here).", counters.skipped),
            ("chrono_reaper_dashboard_snapshot_failures",
             "Snapshot computations that failed (logged; retried with back-off).",
             counters.failed),
            ("chrono_reaper_dashboard_snapshot_seconds",
             "Seconds spent computing and writing dashboard snapshots.", counters.seconds),
        ):
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], value)
            yield family
        for name, documentation, value in (
            ("chrono_reaper_dashboard_snapshot_last_seconds",
             "Seconds the last snapshot took to compute and write.", counters.last_seconds),
            ("chrono_reaper_dashboard_snapshot_last_bytes",
             "Size of the last snapshot written.", counters.last_bytes),
        ):
            family = GaugeMetricFamily(name, documentation)
            family.add_metric([], value)
            yield family
