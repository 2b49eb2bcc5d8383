"""``/metrics`` of the web process: the platform's state, computed when Prometheus scrapes.

The web process runs no loop of its own, so what it exposes is what it can read cheaply at scrape
time; the beat, the worker, the reaper and the indexer expose what they do on their own probe
ports (:mod:`chronocore.probe`). Every read here is bounded, whatever the size of the tables:

* **Redis**: the timers of every shard (``ZCARD`` of each ``due`` and ``inflight`` set), the lease
  of every shard and the live beat replicas: two pipelined round trips;
* **PostgreSQL**, each statement capped at 2 s: executions by status among those scheduled in the
  last :data:`RECENT_WINDOW_S` (a range of ``execution_scheduled_for_idx``, never a scan of the
  table); workers heard from in the last hour (``worker_last_heartbeat_idx``); the oldest and the
  newest unshipped audit row (two ends of ``auditevent_unshipped_idx``); the executions waiting
  past ``undelivered_flag_after_ms``, by queue (the reaper's query, through the partial index of
  unfinished executions: :mod:`reaper.undelivered`);
* **RabbitMQ**: a passive declare of each queue worth watching (the default queue, the queues
  workers consume, the queues executions wait on, the retry tiers).

A source that does not answer is left out of that scrape, and ``chrono_metrics_source_up`` says
which. With ``CHRONO_METRICS_BEARER_TOKEN`` set, a scrape must send it.
"""

from __future__ import annotations

import hmac
import logging
from datetime import timedelta

import redis
from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from chronoadmin.health import bounded_statements, queue_inspector, redis_client

# get_config() here: the web's /metrics is a Django view and its collector runs per scrape: the
# process edge, nothing owns them to hand them the configuration.
from chronocore.config import get_config
from reaper.undelivered import waiting_queues
from scheduler.clock import now_ms
from scheduler.dispatch import retry_tier_name
from scheduler.ownership import REPLICAS_KEY
from scheduler.queue_stats import BrokerUnavailable
from scheduler.retry import RETRY_TIERS_MS
from scheduler.sharding import shard_tag
from scheduler.timers import shard_keys

RECENT_WINDOW_S = 60
WORKERS_SEEN_WITHIN = timedelta(hours=1)

log = logging.getLogger("chrono.metrics")

_RECENT_SQL = (
    "SELECT status, count(*) FROM chrono_execution WHERE scheduled_for >= %s GROUP BY status"
)
_WORKERS_SQL = (
    "SELECT CASE WHEN stopped_at IS NOT NULL THEN 'stopped' WHEN NOT is_healthy THEN 'down' "
    "WHEN last_heartbeat_at < %s THEN 'silent' "
    "ELSE 'healthy' END, count(*), string_agg(DISTINCT queue_name, ',') "
    "FROM chrono_worker WHERE last_heartbeat_at >= %s GROUP BY 1"
)
_OUTBOX_SQL = (
    "SELECT m.lo, m.hi, a.occurred_at FROM (SELECT min(id) AS lo, max(id) AS hi "
    "FROM search_auditevent WHERE shipped_at IS NULL) m "
    "LEFT JOIN search_auditevent a ON a.id = m.lo"
)


def _gauge(name: str, documentation: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)


class PlatformCollector:
    """The series of the web's ``/metrics``; each scrape reads them afresh."""

    def collect(self):
        config = get_config()
        up = _gauge("chrono_metrics_source_up",
                    "1 when the source answered this scrape (its series are then present).",
                    ["source"])
        families: list[GaugeMetricFamily] = []
        queues = {config.default_queue: None, **{retry_tier_name(t): None for t in RETRY_TIERS_MS}}
        reads = (("redis", lambda: self._redis(config)),
                 ("postgresql", lambda: self._postgresql(config, queues)))
        for source, read in reads:
            try:
                families += read()
                up.add_metric([source], 1)
            except (redis.RedisError, DatabaseError, OSError) as exc:
                log.warning("metrics: %s did not answer: %r", source, exc)
                up.add_metric([source], 0)
        try:
            families += self._rabbitmq(queues)
            up.add_metric(["rabbitmq"], 1)
        except BrokerUnavailable as exc:
            log.warning("metrics: rabbitmq did not answer: %s", exc)
            up.add_metric(["rabbitmq"], 0)
        yield up
        yield from families

    # -- Redis ------------------------------------------------------------------------------

    def _redis(self, config) -> list[GaugeMetricFamily]:
        client = redis_client()
        pipe = client.pipeline(transaction=False)
        for shard in range(config.shard_count):
            due, inflight, _, _ = shard_keys(shard)
            pipe.zcard(due)
            pipe.zcard(inflight)
            pipe.get(f"{shard_tag(shard)}:lease")
        pipe.zcount(REPLICAS_KEY, now_ms(), "+inf")
        replies = pipe.execute()
        replicas = replies.pop()
        due = sum(replies[0::3])
        inflight = sum(replies[1::3])
        owners: dict[str, int] = {}
        unowned = 0
        for lease in replies[2::3]:
            if lease is None:
                unowned += 1
            else:
                replica = lease.decode().split("|")[0]
                owners[replica] = owners.get(replica, 0) + 1
        pending = _gauge("chrono_timers_pending",
                         "Timers in the timer store (due and inflight: what `pending_count` says).")
        pending.add_metric([], due + inflight)
        claimed = _gauge("chrono_timers_inflight",
                         "Timers claimed by a beat and not yet acknowledged.")
        claimed.add_metric([], inflight)
        shards = _gauge("chrono_beat_shards_owned", "Shards whose lease each replica holds.",
                        ["replica"])
        for replica, count in sorted(owners.items()):
            shards.add_metric([replica], count)
        orphaned = _gauge("chrono_beat_shards_unowned",
                          "Shards no replica holds a lease on: nobody fires their timers.")
        orphaned.add_metric([], unowned)
        live = _gauge("chrono_beat_replicas", "Beat replicas whose membership is live.")
        live.add_metric([], replicas)
        return [pending, claimed, shards, orphaned, live]

    # -- PostgreSQL ---------------------------------------------------------------------------

    def _postgresql(self, config, queues) -> list[GaugeMetricFamily]:
        now = timezone.now()
        heartbeat_s = config.worker_heartbeat_interval_ms / 1000
        silent_after = timedelta(seconds=heartbeat_s * config.worker_dead_after_missed_heartbeats)
        with transaction.atomic(), connection.cursor() as cursor:
            bounded_statements(cursor)
            cursor.execute(_RECENT_SQL, [now - timedelta(seconds=RECENT_WINDOW_S)])
            recent_rows = cursor.fetchall()
            cursor.execute(_WORKERS_SQL, [now - silent_after, now - WORKERS_SEEN_WITHIN])
            worker_rows = cursor.fetchall()
            cursor.execute(_OUTBOX_SQL)
            lowest, highest, oldest_at = cursor.fetchone()
            waiting = waiting_queues(before_ms=now_ms() - config.undelivered_flag_after_ms)
        recent = _gauge(
            "chrono_executions_recent",
            f"Executions scheduled in the last {RECENT_WINDOW_S} s, by their status now.",
            ["status"])
        for status, count in sorted(recent_rows):
            recent.add_metric([status], count)
        workers = _gauge(
            "chrono_workers",
            "Workers heard from in the last hour: healthy, silent (missed their heartbeats, "
            "not marked down yet: is a reaper running?), down (lost: stopped heartbeating "
            "without a final heartbeat) or stopped (a warm shutdown's final heartbeat: a "
            "deploy, a scale-down).", ["health"])
        seen = {health: count for health, count, _ in worker_rows}
        for health in ("healthy", "silent", "down", "stopped"):
            workers.add_metric([health], seen.get(health, 0))
        for health, _, names in worker_rows:
            if health not in ("down", "stopped"):
                queues.update(dict.fromkeys(q for q in (names or "").split(",") if q))
        backlog = _gauge(
            "chrono_audit_outbox_unshipped_rows",
            "Audit rows not shipped to the search engine yet (the span of their ids: an upper "
            "bound, ids rolled back count too).")
        backlog.add_metric([], 0 if lowest is None else highest - lowest + 1)
        lag = _gauge("chrono_audit_outbox_lag_seconds",
                     "Age of the oldest audit row not shipped yet (0: none waits).")
        lag.add_metric([], 0 if oldest_at is None else max(0.0, (now - oldest_at).total_seconds()))
        waiting_family = _gauge(
            "chrono_dispatched_waiting_executions",
            "Executions DISPATCHED longer than undelivered_flag_after_ms and not started, "
            "by queue.", ["queue"])
        flagged = _gauge(
            "chrono_undelivered_executions",
            "Of those, the executions the reaper flagged: their queue has no consumer.",
            ["queue"])
        for queue, entry in sorted(waiting.items()):
            waiting_family.add_metric([queue], entry.waiting)
            flagged.add_metric([queue], entry.flagged)
            queues[queue] = None
        return [recent, workers, backlog, lag, waiting_family, flagged]

    # -- RabbitMQ -----------------------------------------------------------------------------

    def _rabbitmq(self, queues) -> list[GaugeMetricFamily]:
        stats = queue_inspector().stats(queues)
        depth = _gauge("chrono_queue_messages",
                       "Messages ready in the queue (not counting those delivered, unacked).",
                       ["queue"])
        consumers = _gauge("chrono_queue_consumers", "Consumers of the queue.", ["queue"])
        for queue, entry in sorted(stats.items()):
            if entry.exists:
                depth.add_metric([queue], entry.messages)
                consumers.add_metric([queue], entry.consumers)
        return [depth, consumers]


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(PlatformCollector())


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition of :class:`PlatformCollector` (text, or OpenMetrics when the
    scraper asks for it)."""
    token = get_config().metrics_bearer_token
    if token:
        sent = request.headers.get("Authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            response = HttpResponse("a bearer token is required (CHRONO_METRICS_BEARER_TOKEN)\n",
                                    status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="chrono-metrics"'
            return response
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = HttpResponse(encoder(REGISTRY), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response
