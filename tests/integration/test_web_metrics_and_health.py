"""The web process's ``/metrics`` and ``/health/`` against the real services: the series it
lists, read from PostgreSQL, Redis and RabbitMQ; a source that does not answer left out and
named; the health of all four services, and 503 naming the one that is down."""

from __future__ import annotations

import uuid
from datetime import timedelta

import amqp
import pytest
from django.test import Client
from django.utils import timezone

from chronoadmin import health, metrics
from chronocore.config import get_config
from chronocore.probe import free_port
from reaper.models import Worker
from scheduler import api
from scheduler.dispatch import amqp_connection_params, declare_queue
from scheduler.models import Execution
from scheduler.queue_stats import QueueInspector
from search.client import SearchClient
from tests.metrics_support import names, value

pytestmark = pytest.mark.django_db(transaction=True)

WEB_SERIES = {
    "chrono_metrics_source_up", "chrono_timers_pending", "chrono_timers_inflight",
    "chrono_beat_shards_unowned", "chrono_beat_replicas", "chrono_executions_recent",
    "chrono_workers", "chrono_audit_outbox_unshipped_rows", "chrono_audit_outbox_lag_seconds",
    "chrono_queue_messages", "chrono_queue_consumers",
}


def scrape(client: Client | None = None, **headers: str) -> str:
    response = (client or Client()).get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


@pytest.fixture
def unreachable_broker(monkeypatch):
    closed = QueueInspector(f"amqp://guest:guest@127.0.0.1:{free_port()}//")
    monkeypatch.setattr(health, "queue_inspector", lambda: closed)
    monkeypatch.setattr(metrics, "queue_inspector", lambda: closed)


@pytest.fixture
def unreachable_search(monkeypatch):
    closed = SearchClient(f"http://127.0.0.1:{free_port()}", connect_timeout_s=1)
    monkeypatch.setattr(health, "search_client", lambda: closed)


def test_metrics_lists_the_platforms_series_read_from_its_services(tenant, queue, redis_client):
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        declare_queue(conn.channel(), queue)
        now = timezone.now()
        Worker.objects.create(worker_id=f"w1@{queue}", queue_name=queue,
                              last_heartbeat_at=now)
        Worker.objects.create(worker_id="w2@gone", queue_name=queue, is_healthy=False,
                              last_heartbeat_at=now - timedelta(minutes=5))
        # Stopped cleanly (a deploy): not down.
        Worker.objects.create(worker_id="w3@deployed", queue_name=queue, is_healthy=False,
                              last_heartbeat_at=now - timedelta(minutes=4),
                              stopped_at=now - timedelta(minutes=4))
        jobs = [api.schedule_once("tests.noop", tenant=tenant, queue=queue, delay=3600)
                for _ in range(3)]
        for job, status in zip(jobs, ("SUCCEEDED", "SUCCEEDED", "FAILED"), strict=True):
            Execution.objects.create(execution_id=uuid.uuid4(), job=job, tenant=tenant,
                                     scheduled_for=now - timedelta(seconds=5), status=status)
        Execution.objects.create(execution_id=uuid.uuid4(), job=jobs[0], tenant=tenant,
                                 scheduled_for=now - timedelta(minutes=10), status="FAILED")

        text = scrape()

    assert WEB_SERIES <= names(text), WEB_SERIES - names(text)
    for source in ("redis", "postgresql", "rabbitmq"):
        assert value(text, "chrono_metrics_source_up", source=source) == 1
    assert value(text, "chrono_timers_pending") == 3
    assert value(text, "chrono_beat_shards_unowned") == get_config().shard_count
    # Only the last minute's executions count: the FAILED one of ten minutes ago does not.
    assert value(text, "chrono_executions_recent", status="SUCCEEDED") == 2
    assert value(text, "chrono_executions_recent", status="FAILED") == 1
    assert value(text, "chrono_workers", health="healthy") == 1
    assert value(text, "chrono_workers", health="down") == 1
    assert value(text, "chrono_workers", health="silent") == 0
    assert value(text, "chrono_workers", health="stopped") == 1
    # The queue a live worker consumes is inspected; nobody consumes it here.
    assert value(text, "chrono_queue_consumers", queue=queue) == 0
    assert value(text, "chrono_queue_messages", queue=queue) == 0
    assert value(text, "chrono_audit_outbox_unshipped_rows") >= 3  # the jobs' job.created rows
    assert value(text, "chrono_audit_outbox_lag_seconds") >= 0


def test_a_source_that_does_not_answer_is_left_out_and_named(unreachable_broker, redis_client):
    text = scrape()
    assert value(text, "chrono_metrics_source_up", source="rabbitmq") == 0
    assert value(text, "chrono_metrics_source_up", source="postgresql") == 1
    assert "chrono_queue_consumers" not in names(text)
    assert "chrono_timers_pending" in names(text)


def test_metrics_asks_for_the_bearer_token_when_one_is_configured(chrono_config, redis_client):
    chrono_config(metrics_bearer_token="s3cret-token")
    refused = Client().get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "chrono_timers_pending" in scrape(Authorization="Bearer s3cret-token")


def test_health_checks_postgresql_redis_rabbitmq_and_the_search_engine(redis_client):
    response = Client().get("/health/")
    body = response.json()
    assert response.status_code == 200, body
    assert body["healthy"] is True and body["failing"] == []
    assert set(body["checks"]) == {"postgresql", "redis", "rabbitmq", "search"}
    assert body["checks"]["search"]["status"] in ("green", "yellow")
    assert all(check["took_ms"] >= 0 for check in body["checks"].values())


def test_health_answers_503_naming_what_is_down(unreachable_broker, unreachable_search):
    response = Client().get("/health/")
    body = response.json()
    assert response.status_code == 503
    assert body["failing"] == ["rabbitmq", "search"]
    assert body["checks"]["postgresql"]["healthy"] is True
    assert "BrokerUnavailable" in body["checks"]["rabbitmq"]["error"]
    assert "SearchUnavailable" in body["checks"]["search"]["error"]


def test_liveness_checks_nothing_but_the_process(unreachable_broker, unreachable_search):
    for path in ("/health/live", "/health/live/"):
        response = Client().get(path)
        assert response.status_code == 200 and response.json() == {"live": True}
