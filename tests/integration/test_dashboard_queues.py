"""The dashboard's queue panel against a real RabbitMQ: depth, consumers and the executions
waiting per queue; and, with a broker that never answers or refuses, the dashboard's figures
come at once, the panel saying unknown or stale and why, one question at a time."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from datetime import timedelta

import amqp
import pytest
from django.test import Client
from django.utils import timezone

from chronoadmin import dashboard_queues
from chronoadmin.dashboard_queues import QueuePanel, queues_panel
from chronocore.config import get_config
from chronocore.probe import free_port
from reaper.models import Worker
from scheduler import api
from scheduler.dispatch import amqp_connection_params, declare_queue
from scheduler.models import Execution, ExecutionStatus
from scheduler.queue_stats import QueueInspector

pytestmark = pytest.mark.django_db(transaction=True)


def real_panel(**options) -> QueuePanel:
    return QueuePanel(inspector=lambda: QueueInspector(get_config().broker_url), **options)


class SilentBroker:
    """A TCP port that accepts connections and never says a word (a broker hung or far away);
    counts the connections it accepted."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted: list[socket.socket] = []
        self.url = f"amqp://guest:guest@127.0.0.1:{self.sock.getsockname()[1]}//"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        for connection in self.accepted:
            connection.close()
        self.sock.close()


@pytest.fixture
def silent_broker():
    broker = SilentBroker()
    yield broker
    broker.close()


def publish(queue: str, count: int) -> None:
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        channel = conn.channel()
        declare_queue(channel, queue)
        channel.confirm_select()
        for i in range(count):
            channel.basic_publish(amqp.Message(f"m{i}"), exchange="", routing_key=queue)
        # A quorum queue counts a confirmed message a moment later.
        deadline = time.monotonic() + 10
        while channel.queue_declare(queue, passive=True)[1] < count:
            assert time.monotonic() < deadline, "RabbitMQ never counted the messages"
            time.sleep(0.05)


def test_the_panel_shows_depth_consumers_and_waiting_executions(tenant, queue, redis_client):
    publish(queue, 3)
    job = api.schedule_once("tests.noop", tenant=tenant, queue=queue, delay=3600)
    long_ago = timezone.now() - timedelta(minutes=10)
    Execution.objects.create(execution_id=uuid.uuid4(), job=job, tenant=tenant,
                             scheduled_for=long_ago, dispatched_at=long_ago,
                             status=ExecutionStatus.DISPATCHED)
    missing = f"nobody-{uuid.uuid4().hex[:8]}"
    data = queues_panel([missing], panel=real_panel())
    assert data["state"] == "ok" and data["reason"] is None
    rows = {row["queue"]: row for row in data["queues"]}
    assert rows[queue] == {"queue": queue, "exists": True, "messages": 3, "consumers": 0,
                           "waiting": 1, "flagged": 0}
    assert rows[missing]["exists"] is False and rows[missing]["messages"] is None
    assert get_config().default_queue in rows


def test_a_broker_that_never_answers_leaves_the_panel_unknown_without_holding_it_up(
        silent_broker):
    panel = QueuePanel(inspector=lambda: QueueInspector(silent_broker.url), wait_ms=200)
    started = time.monotonic()
    first = panel.stats(["chrono"])
    assert time.monotonic() - started < 1.0
    assert first["state"] == "unknown"
    assert "has not answered within 200 ms" in first["reason"]
    assert first["queues"] == [{"queue": "chrono", "exists": None, "messages": None,
                                "consumers": None}]
    second = panel.stats(["chrono"])  # the first question still runs: no second one
    assert second["state"] == "unknown"
    assert len(silent_broker.accepted) == 1
    # The inspector's own timeouts end the question; its error is then the reason.
    deadline = time.monotonic() + 15
    while "RabbitMQ at 127.0.0.1" not in (panel.stats(["chrono"])["reason"] or ""):
        assert time.monotonic() < deadline, "the question never ended"
        time.sleep(0.3)


def test_a_refusing_broker_is_unknown_with_its_error():
    panel = QueuePanel(inspector=lambda: QueueInspector(
        f"amqp://guest:guest@127.0.0.1:{free_port()}//"))
    data = panel.stats(["chrono"])
    assert data["state"] == "unknown"
    assert data["reason"].startswith("RabbitMQ at 127.0.0.1") and "Refused" in data["reason"]


class SlowAfterFirstAnswer(QueueInspector):
    """The real inspector, which takes a second to answer after its first answer."""

    answers = 0

    def stats(self, queues):
        if self.answers:
            time.sleep(1.0)
        self.answers += 1
        return super().stats(queues)


def test_a_late_answer_shows_the_last_one_as_stale_with_its_age(queue):
    publish(queue, 2)
    now = [1000.0]
    panel = QueuePanel(inspector=lambda: SlowAfterFirstAnswer(get_config().broker_url),
                       ttl_s=5, wait_ms=100, clock=lambda: now[0])
    assert panel.stats([queue])["state"] == "ok"
    now[0] += 7  # past the answer's time to live
    stale = panel.stats([queue])
    assert stale["state"] == "stale" and stale["age_s"] == 7.0
    assert "has not answered within 100 ms" in stale["reason"]
    assert stale["queues"][0]["messages"] == 2  # the last answer's figures
    now[0] += 120  # past the stale limit: figures no longer shown
    assert panel.stats([queue])["queues"][0]["messages"] is None


def test_the_dashboard_data_comes_at_once_when_rabbitmq_hangs(silent_broker, admin_client,
                                                             monkeypatch, redis_client):
    panel = QueuePanel(inspector=lambda: QueueInspector(silent_broker.url))
    monkeypatch.setattr(dashboard_queues, "queue_panel", lambda: panel)
    Worker.objects.create(worker_id="w1@h", queue_name="chrono,reports",
                          last_heartbeat_at=timezone.now())
    started = time.monotonic()
    answer = admin_client.get("/admin/dashboard/data/")
    took = time.monotonic() - started
    assert answer.status_code == 200 and took < 1.5, took
    queues = answer.json()["queues"]
    assert queues["state"] == "unknown" and "has not answered" in queues["reason"]
    assert [q["queue"] for q in queues["queues"]][:2] == ["chrono", "reports"]
    assert Client().get("/admin/dashboard/data/").status_code == 302  # still staff only
