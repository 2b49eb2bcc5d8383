"""A BROKER_URL that lists several nodes, against the real RabbitMQ: the publisher and the queue
inspector skip a node that refuses connections and use the next one. (Failing over on a real
cluster, a node killed mid-dispatch: tests/cluster/test_rabbitmq_node_killed.py.)"""

from __future__ import annotations

import socket
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from chronocore.config import get_config
from scheduler.dispatch import DispatchError, Publisher, TaskMessage, connect_to_first_node
from scheduler.queue_stats import QueueInspector
from tests.integration.test_dispatch import drain


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _dead_node() -> str:
    """The shared node's URL (user, password, vhost) at a port where nothing listens."""
    parts = urlsplit(get_config().broker_url)
    netloc = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@127.0.0.1:{_closed_port()}"))


def test_a_publisher_skips_a_node_that_refuses_and_publishes_through_the_next(queue):
    live = get_config().broker_url
    publisher = Publisher(f"{_dead_node()};{live}", origin="test")
    task_id = str(uuid.uuid4())
    publisher.publish_batch([TaskMessage(task_id=task_id, task_name="chrono.echo", queue=queue)])
    assert publisher.node == f"127.0.0.1:{urlsplit(live).port or 5672}"
    publisher.close()
    assert [m.headers["id"] for m in drain(queue)] == [task_id]


def test_a_publisher_with_no_node_answering_raises_naming_every_node(queue):
    dead = [_dead_node(), _dead_node()]
    publisher = Publisher(";".join(dead), origin="test")
    with pytest.raises(DispatchError, match="no RabbitMQ node accepted a connection") as error:
        publisher.publish_batch([TaskMessage(task_id="t", task_name="chrono.noop", queue=queue)])
    for url in dead:
        assert f"127.0.0.1:{urlsplit(url).port}" in str(error.value)
    assert urlsplit(dead[0]).password not in str(error.value)


def test_the_first_node_answering_is_taken_from_the_index_given_round_robin():
    live = get_config().broker_url
    urls = [live, _dead_node()]
    index, connection = connect_to_first_node(urls, first=1, connect_timeout=2)
    connection.close()
    assert index == 0, "from node 2 (dead) on to node 1, wrapping around"


def test_the_queue_inspector_asks_the_next_node_when_the_first_refuses(queue):
    publisher = Publisher(get_config().broker_url, origin="test")
    publisher.publish_batch([TaskMessage(task_id="t", task_name="chrono.echo", queue=queue)])
    publisher.close()
    inspector = QueueInspector(f"{_dead_node()};{get_config().broker_url}")
    try:
        stats = inspector.stats([queue])[queue]
    finally:
        inspector.close()
    assert stats.exists and stats.messages == 1
