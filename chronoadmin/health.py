"""The web process's health: ``/health/`` (readiness) and ``/health/live`` (liveness).

``/health/`` asks each service the web process needs — PostgreSQL, Redis, RabbitMQ and the
search engine — one short question with a timeout of its own (2 s), and answers 200 when all
answered, 503 naming those that did not; a load balancer takes the process out of rotation
then. ``/health/live`` asks nothing: it answers 200 while the process serves requests, which is
what a supervisor that restarts processes should probe (restarting the web because PostgreSQL
is down helps nobody).

The clients here are the process's own, kept between requests and built with short timeouts:
the application's own Redis client has none, and a check that hangs is worse than one that
fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache

import redis
from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, JsonResponse

# get_config() here: the web's /health/ is a Django view, its clients the process's: the edge,
# nothing owns them to hand them the configuration.
from chronocore.config import get_config
from chronocore.redis_client import RedisClient, connect
from scheduler.queue_stats import BrokerUnavailable, QueueInspector
from search.client import SearchClient
from search.errors import SearchError

TIMEOUT_S = 2.0


@cache
def redis_client() -> RedisClient:
    config = get_config()
    return connect(config.redis_url, cluster=config.redis_cluster, socket_timeout=TIMEOUT_S,
                   socket_connect_timeout=TIMEOUT_S)


@cache
def queue_inspector() -> QueueInspector:
    return QueueInspector(get_config().broker_url)


@cache
def search_client() -> SearchClient:
    return SearchClient.from_config(get_config(), connect_timeout_s=TIMEOUT_S,
                                    read_timeout_s=TIMEOUT_S, pool_size=2)


def bounded_statements(cursor) -> None:
    """Cap every statement of the current transaction at the checks' timeout."""
    cursor.execute(f"SET LOCAL statement_timeout = {int(TIMEOUT_S * 1000)}")


def check_postgresql() -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        bounded_statements(cursor)
        cursor.execute("SELECT 1")
    return "ok"


def check_redis() -> str:
    redis_client().ping()
    return "ok"


def check_rabbitmq() -> str:
    queue_inspector().ping()
    return "ok"


def check_search() -> str:
    status = search_client().cluster_status()
    if status == "red":
        raise SearchError("cluster health is red: some primary shards are unassigned")
    return status


CHECKS: dict[str, Callable[[], str]] = {
    "postgresql": check_postgresql,
    "redis": check_redis,
    "rabbitmq": check_rabbitmq,
    "search": check_search,
}
FAILURES = (DatabaseError, redis.RedisError, BrokerUnavailable, SearchError, OSError)


def run_checks(checks: dict[str, Callable[[], str]] = CHECKS) -> tuple[bool, dict]:
    """Every check, timed; ``(healthy, body)``."""
    results: dict[str, dict] = {}
    for name, check in checks.items():
        started = time.perf_counter()
        try:
            results[name] = {"healthy": True, "status": check()}
        except FAILURES as exc:
            results[name] = {"healthy": False, "error": f"{type(exc).__name__}: {exc}"}
        results[name]["took_ms"] = round((time.perf_counter() - started) * 1000, 1)
    failing = sorted(name for name, result in results.items() if not result["healthy"])
    return not failing, {"healthy": not failing, "failing": failing, "checks": results}


def health_view(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL, Redis, RabbitMQ and the search engine answer; 503 naming those that
    do not (``failing``), each check with its answer or error and how long it took."""
    healthy, body = run_checks()
    response = JsonResponse(body, status=200 if healthy else 503)
    response["Cache-Control"] = "no-store"
    return response


def live_view(request: HttpRequest) -> JsonResponse:
    """200 while the process serves requests; checks nothing else."""
    response = JsonResponse({"live": True})
    response["Cache-Control"] = "no-store"
    return response
