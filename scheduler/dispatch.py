"""Publishing due executions to RabbitMQ as Celery protocol v2 task messages.

Any Celery worker that has the task registered runs what Chrono publishes; Chrono's own fields ride
in message headers (``chrono_execution_id`` …), which Celery exposes on ``task.request``.

A batch is published on one channel in confirm mode and the confirms are awaited once for the whole
batch (never one at a time: a lone confirm costs a round trip and caps a publisher near 1k/s).
Every message is persistent and goes to the durable ``chrono.dispatch`` direct exchange, routed by
queue name to a quorum queue declared before the first publish to it, so nothing is unroutable.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import amqp
from amqp.method_framing import frame_writer

DISPATCH_EXCHANGE = "chrono.dispatch"
RETRY_EXCHANGE_PREFIX = "chrono.retry."
_EMBED = '{"callbacks":null,"errbacks":null,"chain":null,"chord":null}'
QUEUE_ARGUMENTS = {"x-queue-type": "quorum"}
CONFIRM_TIMEOUT_S = 30.0

log = logging.getLogger("chrono.dispatch")


class DispatchError(Exception):
    """Raised when a batch could not be confirmed by RabbitMQ (nacked, timed out, connection
    lost). The batch's timers stay claimed and are published again; none is lost."""


@dataclass(frozen=True, slots=True)
class TaskMessage:
    """One Celery task invocation, with the Chrono context its worker needs."""

    task_id: str
    task_name: str
    queue: str
    args: Sequence[object] = ()
    kwargs: dict[str, object] = field(default_factory=dict)
    chrono_headers: dict[str, object] = field(default_factory=dict)
    soft_timeout_ms: int | None = None
    hard_timeout_ms: int | None = None
    # The args and kwargs as JSON text, when the caller has them so (the beat reads them from
    # PostgreSQL as text): they go into the body without a decode and re-encode.
    args_json: str | None = None
    kwargs_json: str | None = None

    def encode(self, *, origin: str) -> amqp.Message:
        """The protocol v2 message Celery's worker expects (``celery.app.amqp.as_task_v2``)."""
        args_json = self.args_json or json.dumps(list(self.args), separators=(",", ":"))
        kwargs_json = self.kwargs_json or json.dumps(self.kwargs, separators=(",", ":"))
        body = f"[{args_json},{kwargs_json},{_EMBED}]"
        headers = {
            "lang": "py",
            "task": self.task_name,
            "id": self.task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            # Celery enforces these per message: [hard, soft] seconds.
            "timelimit": [_seconds(self.hard_timeout_ms), _seconds(self.soft_timeout_ms)],
            "root_id": self.task_id,
            "parent_id": None,
            "argsrepr": self.args_json or repr(tuple(self.args)),
            "kwargsrepr": self.kwargs_json or repr(self.kwargs),
            "origin": origin,
            "ignore_result": True,
            **self.chrono_headers,
        }
        return amqp.Message(
            body,
            content_type="application/json",
            content_encoding="utf-8",
            delivery_mode=2,
            priority=0,
            correlation_id=self.task_id,
            reply_to="",
            application_headers=headers,
        )


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def amqp_connection_params(url: str) -> dict[str, object]:
    """py-amqp connection arguments for an ``amqp://user:pass@host:port/vhost`` URL."""
    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) if parts.path not in ("", "/") else "/"
    return {
        "host": f"{parts.hostname or '127.0.0.1'}:{parts.port or 5672}",
        "userid": unquote(parts.username or "guest"),
        "password": unquote(parts.password or "guest"),
        "virtual_host": vhost or "/",
    }


def retry_tier_name(tier_ms: int) -> str:
    return f"{RETRY_EXCHANGE_PREFIX}{tier_ms}"


def declare_retry_tier(channel: amqp.Channel, tier_ms: int) -> None:
    """A retry tier: a fanout exchange and a quorum queue whose messages wait ``tier_ms`` and
    are then dead-lettered, at least once, to the dispatch exchange with their original routing
    key (the target queue)."""
    name = retry_tier_name(tier_ms)
    channel.exchange_declare(DISPATCH_EXCHANGE, "direct", durable=True, auto_delete=False)
    channel.exchange_declare(name, "fanout", durable=True, auto_delete=False)
    channel.queue_declare(
        name,
        durable=True,
        auto_delete=False,
        arguments={
            **QUEUE_ARGUMENTS,
            "x-message-ttl": tier_ms,
            "x-dead-letter-exchange": DISPATCH_EXCHANGE,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        },
    )
    channel.queue_bind(name, name, routing_key="")


def declare_queue(channel: amqp.Channel, queue: str) -> None:
    """Declare the dispatch exchange, ``queue`` as a durable quorum queue, and their binding.
    Celery workers declare the same queue with the same arguments (``chronoadmin.celery``)."""
    channel.exchange_declare(DISPATCH_EXCHANGE, "direct", durable=True, auto_delete=False)
    channel.queue_declare(queue, durable=True, auto_delete=False, arguments=QUEUE_ARGUMENTS)
    channel.queue_bind(queue, DISPATCH_EXCHANGE, routing_key=queue)


class _BatchingTransport:
    """Collects the frames of a batch so they reach the socket in one write, not three
    syscalls per message (py-amqp writes every frame as it is packed)."""

    def __init__(self, transport: object) -> None:
        self.transport = transport
        self.chunks: list[bytes] | None = None

    def write(self, data: bytes | memoryview) -> None:
        if self.chunks is None:
            self.transport.write(data)
        else:
            self.chunks.append(bytes(data))  # py-amqp reuses its buffer: copy now

    def flush(self) -> None:
        chunks, self.chunks = self.chunks, None
        if chunks:
            self.transport.write(b"".join(chunks))


class Publisher:
    """A confirm-mode publisher. Not thread-safe: one per beat loop."""

    def __init__(self, url: str, *, origin: str | None = None) -> None:
        self.url = url
        self.origin = origin or f"chrono-beat@{socket.gethostname()}"
        self._connection: amqp.Connection | None = None
        self._channel: amqp.Channel | None = None
        self._declared: set[str] = set()
        self._next_tag = 1
        self._acked_upto = 0
        self._nacked = False

    def _connect(self) -> amqp.Channel:
        if self._channel is not None:
            return self._channel
        connection = amqp.Connection(**amqp_connection_params(self.url), heartbeat=0,
                                     connect_timeout=10)
        connection.connect()
        self._batching = _BatchingTransport(connection.transport)
        connection.frame_writer = frame_writer(connection, self._batching)
        channel = connection.channel()
        channel.confirm_select()
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        self._connection, self._channel = connection, channel
        self._declared.clear()
        self._next_tag, self._acked_upto, self._nacked = 1, 0, False
        return channel

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        # Tags are confirmed in order on one channel, so the highest tag seen bounds the rest.
        self._acked_upto = max(self._acked_upto, delivery_tag)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._nacked = True
        self._acked_upto = max(self._acked_upto, delivery_tag)

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            try:
                connection.close()
            except Exception as exc:  # the connection is being dropped either way
                log.debug("closing the RabbitMQ connection failed: %s", exc)

    def publish_batch(
        self, messages: Sequence[TaskMessage], *, retry_tier_ms: int = 0
    ) -> None:
        """Publish every message and return once RabbitMQ confirmed them all; with
        ``retry_tier_ms``, through that retry tier (they reach their queue after its TTL).

        Raises :class:`DispatchError` if any is nacked or the confirms do not arrive; the
        connection is then dropped and the next call reconnects.
        """
        if not messages:
            return
        try:
            channel = self._connect()
            for queue in {m.queue for m in messages} - self._declared:
                declare_queue(channel, queue)
                self._declared.add(queue)
            exchange = DISPATCH_EXCHANGE
            if retry_tier_ms:
                exchange = retry_tier_name(retry_tier_ms)
                if exchange not in self._declared:
                    declare_retry_tier(channel, retry_tier_ms)
                    self._declared.add(exchange)
            self._nacked = False
            self._batching.chunks = []
            try:
                for message in messages:
                    channel.basic_publish(
                        message.encode(origin=self.origin),
                        exchange=exchange,
                        routing_key=message.queue,
                    )
            finally:
                self._batching.flush()
            last_tag = self._next_tag + len(messages) - 1
            self._next_tag = last_tag + 1
            self._await_confirms(last_tag)
        except DispatchError:
            self.close()
            raise
        except (OSError, amqp.exceptions.AMQPError) as exc:
            self.close()
            raise DispatchError(f"publishing {len(messages)} messages failed: {exc!r}") from exc
        if self._nacked:
            raise DispatchError(f"RabbitMQ nacked a message of a batch of {len(messages)}")

    def _await_confirms(self, last_tag: int) -> None:
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while self._acked_upto < last_tag:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DispatchError(f"no confirm for tag {last_tag} in {CONFIRM_TIMEOUT_S} s")
            try:
                self._connection.drain_events(timeout=remaining)
            except TimeoutError:
                continue
