"""How many messages wait in a dispatch queue and how many consumers it has, asked over AMQP.

A passive ``queue.declare`` creates nothing and answers ``message_count`` (ready messages, not
the ones delivered and unacknowledged) and ``consumer_count``: one round trip per queue, no
management plugin needed. A queue that does not exist answers 404, which closes the channel
(not the connection): the next queue is asked on a new channel.

Used by the reaper's check of executions nobody consumes (:mod:`reaper.undelivered`) and by the
web process's ``/metrics`` and ``/health/``. One :class:`QueueInspector` keeps one connection
and is safe to share between threads (they take turns). Given a cluster's nodes (``BROKER_URL``
with ``;``), it asks the first that answers, and the next one once that connection fails: the
counts of a quorum queue are the same from any node.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import amqp

from chronocore.broker_urls import node_address, split_broker_urls
from scheduler.dispatch import connect_to_first_node
from scheduler.errors import BrokerUnavailable

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 2.0

log = logging.getLogger("chrono.queues")


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What RabbitMQ said of one queue; ``exists`` False when it has no such queue."""

    queue: str
    exists: bool
    messages: int = 0
    consumers: int = 0


class QueueInspector:
    """Passive declares over one lazily opened connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.urls = split_broker_urls(url)
        self._node = 0  # the node asked first
        self._lock = threading.Lock()
        self._connection: amqp.Connection | None = None
        self._channel: amqp.Channel | None = None

    def stats(self, queues: Iterable[str]) -> dict[str, QueueStats]:
        """The stats of each of ``queues``. Raises :class:`BrokerUnavailable`."""
        names = list(dict.fromkeys(queues))
        with self._lock:
            while True:
                reused = self._connection is not None
                try:
                    return {queue: self._declare(queue) for queue in names}
                except (OSError, amqp.exceptions.AMQPError) as exc:
                    self._close()
                    if reused:
                        self._node = (self._node + 1) % len(self.urls)
                    # A kept connection may have died since (a broker restart): one more try
                    # on a new one before calling the broker unavailable.
                    if not reused:
                        raise BrokerUnavailable(f"RabbitMQ at {self._where()}: {exc!r}") from None

    def ping(self) -> None:
        """One round trip to RabbitMQ (a passive declare of a queue that need not exist).
        Raises :class:`BrokerUnavailable`."""
        self.stats(["chrono.health-probe"])

    def close(self) -> None:
        with self._lock:
            self._close()

    def _declare(self, queue: str) -> QueueStats:
        channel = self._open_channel()
        try:
            _, messages, consumers = channel.queue_declare(queue, passive=True)
        except amqp.exceptions.NotFound:
            self._channel = None  # RabbitMQ closed it
            return QueueStats(queue, exists=False)
        return QueueStats(queue, exists=True, messages=messages, consumers=consumers)

    def _open_channel(self) -> amqp.Channel:
        if self._connection is None:
            self._node, self._connection = connect_to_first_node(
                self.urls, first=self._node, heartbeat=0, connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S, write_timeout=READ_TIMEOUT_S)
        if self._channel is None:
            self._channel = self._connection.channel()
        return self._channel

    def _close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            try:
                connection.collect()  # drop it without a closing handshake that could hang
            except Exception as exc:  # it is being dropped either way
                log.debug("dropping the inspector's RabbitMQ connection failed: %r", exc)

    def _where(self) -> str:
        return ", ".join(node_address(url) for url in self.urls)
