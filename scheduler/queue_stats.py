"""How many messages wait in a dispatch queue and how many consumers it has, asked over AMQP.

A passive ``queue.declare`` creates nothing and answers ``message_count`` (ready messages, not
the ones delivered and unacknowledged) and ``consumer_count``: one round trip per queue, no
management plugin needed. A queue that does not exist answers 404, which closes the channel
(not the connection): the next queue is asked on a new channel.

Used by the reaper's check of executions nobody consumes (:mod:`reaper.undelivered`) and by the
web process's ``/metrics`` and ``/health/``. One :class:`QueueInspector` keeps one connection
and is safe to share between threads (they take turns).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import amqp

from scheduler.dispatch import amqp_connection_params
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
            connection = amqp.Connection(**amqp_connection_params(self.url), heartbeat=0,
                                         connect_timeout=CONNECT_TIMEOUT_S,
                                         read_timeout=READ_TIMEOUT_S,
                                         write_timeout=READ_TIMEOUT_S)
            connection.connect()
            self._connection = connection
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
        return str(amqp_connection_params(self.url)["host"])
