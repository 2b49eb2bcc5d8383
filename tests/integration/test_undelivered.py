"""Executions waiting on a queue nobody consumes are flagged by the reaper (real PostgreSQL and
RabbitMQ), the flag shows in the REST API, and it comes off when a consumer appears or the
execution starts."""

from __future__ import annotations

import uuid

import amqp
import pytest
from django.db import connection, transaction

from chronocore.config import get_config
from reaper.reaper import Reaper
from reaper.undelivered import _WAITING_SQL, check_undelivered
from scheduler import api
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.dispatch import Publisher, amqp_connection_params, declare_queue
from scheduler.executions import start_execution
from scheduler.lifecycle import UNDELIVERED_REASON_PREFIX
from scheduler.models import Execution
from scheduler.queue_stats import QueueInspector

pytestmark = pytest.mark.django_db(transaction=True)

FLAG_AFTER_MS = 2_000


@pytest.fixture
def broker():
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        yield conn


@pytest.fixture
def inspector():
    inspector = QueueInspector(get_config().broker_url)
    yield inspector
    inspector.close()


def dispatched(tenant, queue: str, *, waited_ms: int, reason: str = "") -> Execution:
    job = api.schedule_once("tests.noop", tenant=tenant, queue=queue, delay=60)
    return Execution.objects.create(
        execution_id=uuid.uuid4(), job=job, tenant=tenant, scheduled_for=job.next_run_at,
        status="DISPATCHED", dispatched_at=ms_to_datetime(now_ms() - waited_ms), reason=reason,
    )


def reason_of(execution: Execution) -> str:
    execution.refresh_from_db()
    return execution.reason


def test_executions_waiting_past_the_limit_on_a_queue_without_consumers_are_flagged_once(
    tenant, queue, broker, inspector, redis_client
):
    declare_queue(broker.channel(), queue)
    old = dispatched(tenant, queue, waited_ms=5_000)
    recent = dispatched(tenant, queue, waited_ms=500)

    report = check_undelivered(inspector=inspector, now_ms=now_ms(), flag_after_ms=FLAG_AFTER_MS)

    assert report.flagged == {queue: 1}
    assert report.broker[queue].consumers == 0
    assert reason_of(old) == f"no consumer on queue `{queue}` for 2 s"
    assert reason_of(recent) == ""
    again = check_undelivered(inspector=inspector, now_ms=now_ms(), flag_after_ms=FLAG_AFTER_MS)
    assert again.flagged == {} and again.undelivered() == {queue: 1}
    assert reason_of(old) == f"no consumer on queue `{queue}` for 2 s"


def test_the_flag_comes_off_when_the_queue_has_a_consumer_again(
    tenant, queue, broker, inspector, redis_client
):
    declare_queue(broker.channel(), queue)
    waiting = dispatched(tenant, queue, waited_ms=5_000)
    check_undelivered(inspector=inspector, now_ms=now_ms(), flag_after_ms=FLAG_AFTER_MS)
    assert reason_of(waiting).startswith(UNDELIVERED_REASON_PREFIX)

    broker.channel().basic_consume(queue, callback=lambda message: None)
    report = check_undelivered(inspector=inspector, now_ms=now_ms(), flag_after_ms=FLAG_AFTER_MS)

    assert report.cleared == {queue: 1} and report.flagged == {}
    assert reason_of(waiting) == ""


def test_a_queue_missing_from_rabbitmq_counts_as_having_no_consumer(
    tenant, queue, inspector, redis_client
):
    waiting = dispatched(tenant, queue, waited_ms=5_000)
    report = check_undelivered(inspector=inspector, now_ms=now_ms(), flag_after_ms=FLAG_AFTER_MS)
    assert report.broker[queue].exists is False
    assert reason_of(waiting).startswith(f"no consumer on queue `{queue}`")


def test_the_start_takes_the_flag_off_and_keeps_the_reason_it_had_before(
    tenant, queue, inspector, redis_client
):
    plain = dispatched(tenant, queue, waited_ms=5_000)
    retried = dispatched(tenant, queue, waited_ms=5_000, reason="lost on w1")
    check_undelivered(inspector=inspector, now_ms=now_ms(), flag_after_ms=FLAG_AFTER_MS)
    flag = f"no consumer on queue `{queue}` for 2 s"
    assert reason_of(plain) == flag
    assert reason_of(retried) == f"{flag}; lost on w1"

    for execution in (plain, retried):
        assert start_execution(str(execution.execution_id), attempt=1, worker_id="w2",
                               lease_ttl_ms=60_000) is not None
    assert reason_of(plain) == ""
    assert reason_of(retried) == "lost on w1"


def test_the_owner_reads_the_flag_on_the_execution_in_the_rest_api(
    tenant_api, queue, inspector
):
    waiting = dispatched(tenant_api.tenant, queue, waited_ms=5_000)
    check_undelivered(inspector=inspector, now_ms=now_ms(), flag_after_ms=FLAG_AFTER_MS)
    response = tenant_api.get(f"/api/v1/executions/{waiting.execution_id}/")
    assert response.status_code == 200
    assert response.json()["reason"] == f"no consumer on queue `{queue}` for 2 s"
    assert response.json()["status"] == "DISPATCHED"


def test_the_reapers_pass_runs_the_check_and_counts_what_it_flagged(
    tenant, queue, chrono_config, redis_client
):
    chrono_config(undelivered_flag_after_ms=1_000, undelivered_check_interval_ms=100)
    config = get_config()
    dispatched(tenant, queue, waited_ms=3_000)
    from scheduler.timers import timer_store

    reaper = Reaper(config=config, publisher=Publisher(config.broker_url), store=timer_store())
    try:
        reaper.run_once()
    finally:
        reaper.publisher.close()
        reaper.inspector.close()
    assert reaper.counters.undelivered_flagged == {queue: 1}


def test_the_check_of_waiting_executions_is_served_by_the_index_of_unfinished_ones(db):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + _WAITING_SQL, {"before": ms_to_datetime(now_ms()),
                                                   "prefix": UNDELIVERED_REASON_PREFIX})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "execution_job_active_idx" in plan, plan
