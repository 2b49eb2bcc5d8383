"""Publishing due executions to RabbitMQ as Celery protocol v2 task messages.

Any Celery worker that has the task registered runs what Chrono publishes; Chrono's own fields ride
in message headers (``chrono_execution_id`` …), which Celery exposes on ``task.request``.

A batch is published on one channel in confirm mode and the confirms are awaited once for the whole
batch (never one at a time: a lone confirm costs a round trip and caps a publisher near 1k/s).
:meth:`Publisher.send` returns without waiting: the beat's firer keeps publishing what comes due
while earlier batches' confirms are on their way, and reads them as they arrive (each batch's
:class:`Confirmation` settles by delivery tag, in whatever order RabbitMQ confirms).
Every message is persistent and goes to the durable ``chrono.dispatch`` direct exchange, routed by
queue name to a quorum queue declared before the first publish to it, so nothing is unroutable.

``BROKER_URL`` may list every node of a RabbitMQ cluster (``;``-separated,
:mod:`chronocore.broker_urls`): a publisher connects to the first node that answers and, when its
connection breaks, to the next one, round robin. What it had published without a confirm when the
connection broke is reported lost (:attr:`Confirmation.lost`), and its caller publishes it again
(at least once: a message that did reach its queue goes out twice, with the same execution id,
and the worker-side start runs one). A quorum queue confirms a message once a majority of its
replicas hold it, so nothing confirmed is lost with the node the publisher was connected to.
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import time
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from struct import pack, pack_into
from urllib.parse import unquote, urlsplit

import amqp
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps

from chronocore.broker_urls import node_address, split_broker_urls
from scheduler import amqp_frames
from scheduler.errors import DispatchError

DISPATCH_EXCHANGE = "chrono.dispatch"
RETRY_EXCHANGE_PREFIX = "chrono.retry."
_EMBED = '{"callbacks":null,"errbacks":null,"chain":null,"chord":null}'
QUEUE_ARGUMENTS = {"x-queue-type": "quorum"}
CONTENT_TYPE = "application/json"
CONTENT_ENCODING = "utf-8"
CONFIRM_TIMEOUT_S = 30.0
# Per node: a node that is down refuses at once; one that hangs (stopped, cut off) costs this
# much before the next node is tried.
CONNECT_TIMEOUT_S = 10.0

log = logging.getLogger("chrono.dispatch")


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

    def headers(self, *, origin: str) -> dict[str, object]:
        """The protocol v2 headers Celery's worker expects (``celery.app.amqp.as_task_v2``)."""
        return {
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
            "argsrepr": _shortened(self.args_json or repr(tuple(self.args))),
            "kwargsrepr": _shortened(self.kwargs_json or repr(self.kwargs)),
            "origin": origin,
            "ignore_result": True,
            **self.chrono_headers,
        }

    def body(self) -> str:
        """The protocol v2 body: ``[args, kwargs, embed]``."""
        args_json = self.args_json or json.dumps(list(self.args), separators=(",", ":"))
        kwargs_json = self.kwargs_json or json.dumps(self.kwargs, separators=(",", ":"))
        return f"[{args_json},{kwargs_json},{_EMBED}]"

    def encode(self, *, origin: str) -> amqp.Message:
        """The protocol v2 message Celery's worker expects (``celery.app.amqp.as_task_v2``)."""
        return amqp.Message(
            self.body(),
            content_type=CONTENT_TYPE,
            content_encoding=CONTENT_ENCODING,
            delivery_mode=2,
            priority=0,
            correlation_id=self.task_id,
            reply_to="",
            application_headers=self.headers(origin=origin),
        )


# The channel and largest frame a message is encoded for ahead of its publish: the publisher's
# one channel is the connection's first, and 131,072 is what py-amqp asks for and RabbitMQ
# grants by default. A connection that negotiated other values gets the message encoded again.
ENCODED_CHANNEL = 1
ENCODED_FRAME_MAX = 131_072
_PUBLISH_METHOD = pack(">HH", *spec.Basic.Publish)
_STAMP_KEY = b"chrono_published_ms"
# The stamp as the header table holds it: the key as a short string, then a signed 64-bit
# integer ('L'), whatever its value (an epoch-ms time is always above 2**31).
_STAMP_MARK = bytes([len(_STAMP_KEY)]) + _STAMP_KEY + b"L"
_STAMP_PLACEHOLDER = 2**40
# The headers whose values differ from one message to the next (an occurrence's ids and time,
# a job's own id and key, the reprs of its payload): written each time; the others' bytes are
# remembered (:func:`scheduler.amqp_frames.table`). The payload's reprs vary too: the instances
# of a fan-out share everything but their input, and a payload in the signature made a
# template per message (10,000 templates built and forgotten for a 10,000-way fan-out, more
# than half of the beat's preparation of it).
VARYING_HEADERS = frozenset({"id", "root_id", "chrono_execution_id", "chrono_fire_ms",
                             "chrono_job_id", "chrono_idempotency_key", "argsrepr",
                             "kwargsrepr"})


@dataclass(frozen=True, slots=True)
class EncodedMessage:
    """A message's AMQP frames (method, header, body) ready to write, but for its publish time,
    which :meth:`Publisher.send_encoded` writes into the 8 bytes at ``stamp_offset``.

    The beat encodes a burst while it prepares it, so that at the fire time only the writes are
    left: py-amqp encodes and frames a message for each ``basic_publish`` (~100 µs on this
    machine, 1 s for 10,000), which would be paid after the fire time. The frames are built here
    from the AMQP 0-9-1 layout because py-amqp's frame writer writes to its socket as it packs;
    the properties by :mod:`scheduler.amqp_frames` (py-amqp's bytes, at a fraction of its
    serializer's cost), the method's arguments by py-amqp's own ``dumps``.
    """

    message: TaskMessage
    exchange: str
    frames: bytes
    stamp_offset: int


def encode_for_publish(message: TaskMessage, *, origin: str,
                       exchange: str = DISPATCH_EXCHANGE) -> EncodedMessage:
    """``message``'s frames for a ``basic.publish`` on :data:`ENCODED_CHANNEL`."""
    headers = message.headers(origin=origin)
    headers["chrono_published_ms"] = _STAMP_PLACEHOLDER
    body = message.body().encode("utf-8")
    # The properties by amqp_frames rather than py-amqp's Message: the same bytes (the unit
    # tests compare them) for a fraction of the cost, paid per message of every burst.
    properties = amqp_frames.task_properties(
        content_type=CONTENT_TYPE, content_encoding=CONTENT_ENCODING, headers=headers,
        delivery_mode=2, priority=0, correlation_id=message.task_id, reply_to="",
        varying=VARYING_HEADERS, signature=_signature(message, origin))
    method = _publish_method(exchange, message.queue)
    header = pack(">HHQ", spec.Basic.Publish[0], 0, len(body)) + properties
    parts = [_frame(1, method), _frame(2, header)]
    chunk = ENCODED_FRAME_MAX - 8
    parts += [_frame(3, body[i:i + chunk]) for i in range(0, len(body), chunk)]
    frames = b"".join(parts)
    mark = frames.find(_STAMP_MARK)
    return EncodedMessage(message, exchange, frames, mark + len(_STAMP_MARK))


def _signature(message: TaskMessage, origin: str) -> Hashable:
    """What every header of ``message`` outside :data:`VARYING_HEADERS` is made of (with the
    types of the values that could compare equal across types), so that messages with the same
    one share a headers template (:func:`scheduler.amqp_frames.templated_table`); None: none
    (an unhashable header). The payload is not in it: only ``argsrepr`` and ``kwargsrepr``
    (varying, always text) come from it."""
    hard, soft = message.hard_timeout_ms, message.soft_timeout_ms
    signature = (origin, message.task_name, hard, type(hard), soft, type(soft),
                 tuple(message.chrono_headers),
                 tuple([(type(value), value) for name, value
                                    in message.chrono_headers.items()
                                    if name not in VARYING_HEADERS]))
    try:
        hash(signature)
    except TypeError:  # a list or a dict among the headers
        return None
    return signature


@functools.lru_cache(maxsize=1_024)
def _publish_method(exchange: str, routing_key: str) -> bytes:
    return _PUBLISH_METHOD + dumps("Bssbb", (0, exchange, routing_key, False, False))


def _frame(kind: int, payload: bytes) -> bytes:
    return pack(">BHI", kind, ENCODED_CHANNEL, len(payload)) + payload + b"\xce"


# What Celery's own publisher keeps of the args' and kwargs' repr in the headers
# (``celery.app.amqp.AMQP.argsrepr_maxsize``): the headers travel in one frame, so a payload
# near the 256 KiB limit repeated there whole made a frame RabbitMQ refuses (frame_too_large),
# and the job could never be published.
REPR_MAX_CHARS = 1_024


def _shortened(text: str) -> str:
    return text if len(text) <= REPR_MAX_CHARS else text[:REPR_MAX_CHARS - 3] + "..."


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def amqp_connection_params(url: str) -> dict[str, object]:
    """py-amqp connection arguments for an ``amqp[s]://user:pass@host:port/vhost`` URL.

    Any host will do (a broker on another machine, an IPv6 address in brackets); ``amqps://``
    is TLS, verified against the system's certificate authorities, on port 5671 by default.
    """
    if ";" in url:
        raise ValueError("amqp_connection_params takes one node's URL: split a BROKER_URL "
                         "that lists several with chronocore.broker_urls.split_broker_urls")
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "pyamqp", "amqps"):
        raise ValueError(f"BROKER_URL must start with amqp:// or amqps://, got {parts.scheme!r}")
    tls = parts.scheme == "amqps"
    vhost = unquote(parts.path[1:]) if parts.path not in ("", "/") else "/"
    hostname = parts.hostname or "127.0.0.1"
    host = f"[{hostname}]" if ":" in hostname else hostname
    params: dict[str, object] = {
        "host": f"{host}:{parts.port or (5671 if tls else 5672)}",
        "userid": unquote(parts.username or "guest"),
        "password": unquote(parts.password or "guest"),
        "virtual_host": vhost or "/",
    }
    if tls:
        # py-amqp wraps the socket with these SSLContext.wrap_socket arguments; a default
        # context verifies the certificate and the host name.
        params["ssl"] = {"server_hostname": hostname}
    return params


def connect_to_first_node(
    urls: Sequence[str], *, first: int = 0, **options: object
) -> tuple[int, amqp.Connection]:
    """A connection to the first of ``urls``, from index ``first`` on, round robin, that
    accepts one (``options`` are py-amqp's: timeouts, heartbeat), and that node's index.
    Raises :class:`ConnectionError` naming every node and why it failed when none did."""
    failures = []
    for offset in range(len(urls)):
        index = (first + offset) % len(urls)
        connection = amqp.Connection(**amqp_connection_params(urls[index]), **options)
        try:
            connection.connect()
        except (OSError, amqp.exceptions.AMQPError) as exc:
            failures.append(f"{node_address(urls[index])}: {exc!r}")
            try:
                connection.collect()  # no closing handshake with a node that failed
            except Exception as drop_exc:  # it is being dropped either way
                log.debug("dropping a failed connection attempt failed: %r", drop_exc)
            continue
        return index, connection
    raise ConnectionError("no RabbitMQ node accepted a connection: " + "; ".join(failures))


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


@dataclass(eq=False, slots=True)
class Confirmation:
    """What one published batch waits for: RabbitMQ's confirm of each of its delivery tags."""

    size: int
    first_tag: int
    last_tag: int
    sent_at: float = field(default_factory=time.monotonic)
    waiting: set[int] = field(default_factory=set)
    nacked: bool = False
    lost: bool = False  # the connection closed before every confirm came

    @property
    def settled(self) -> bool:
        return self.lost or self.nacked or not self.waiting

    def raise_if_failed(self) -> None:
        if self.lost:
            raise DispatchError(f"the connection closed before {self.size} messages were "
                                "confirmed")
        if self.nacked:
            raise DispatchError(f"RabbitMQ nacked a message of a batch of {self.size}")


class Publisher:
    """A confirm-mode publisher. Not thread-safe: its users take turns (the beat's firer and
    loop share one under a lock)."""

    def __init__(self, url: str, *, origin: str | None = None) -> None:
        self.url = url
        # Every node of the cluster (one for a single node), and the one to try first.
        self.urls = split_broker_urls(url)
        self._node = 0
        self.origin = origin or f"chrono-beat@{socket.gethostname()}"
        self._connection: amqp.Connection | None = None
        self._channel: amqp.Channel | None = None
        self._declared: set[str] = set()
        self._next_tag = 1
        self._unconfirmed: deque[Confirmation] = deque()
        self._stale = False  # a nack came: reconnect before the next publish

    def _connect(self) -> amqp.Channel:
        if self._stale:
            log.warning("%s: RabbitMQ nacked a publish; reconnecting to node %s (what was "
                        "not confirmed yet goes out again)", self.origin, self.node)
            self.close()
        if self._channel is not None:
            return self._channel
        index, connection = connect_to_first_node(
            self.urls, first=self._node, heartbeat=0, connect_timeout=CONNECT_TIMEOUT_S)
        if len(self.urls) > 1:
            # One line per connection (not per publish): which node a process publishes
            # through, and when it moved to another.
            log.info("%s publishing through RabbitMQ node %s (%d of %d)", self.origin,
                     node_address(self.urls[index]), index + 1, len(self.urls))
        self._node = index
        self._batching = _BatchingTransport(connection.transport)
        connection.frame_writer = frame_writer(connection, self._batching)
        channel = connection.channel()
        channel.confirm_select()
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        self._connection, self._channel = connection, channel
        self._declared.clear()
        self._next_tag = 1
        return channel

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple, nacked=False)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple, nacked=True)
        # RabbitMQ 3.10 nacks when a quorum queue has no leader the channel can reach: a
        # channel opened on a surviving node while the queue elected a new leader (its node was
        # killed) went on sending to the dead one and nacked every publish, for minutes, while
        # a new connection published at once (tests/cluster). So the next publish reconnects.
        self._stale = True

    def _settle(self, tag: int, multiple: bool, *, nacked: bool) -> None:
        """A confirm of ``tag`` (and, with ``multiple``, of every tag up to it)."""
        for confirmation in self._unconfirmed:
            if confirmation.first_tag > tag:
                break
            if multiple:
                settled = (set(confirmation.waiting) if confirmation.last_tag <= tag
                           else {t for t in confirmation.waiting if t <= tag})
            else:
                settled = {tag} & confirmation.waiting
            if settled:
                confirmation.waiting -= settled
                confirmation.nacked = confirmation.nacked or nacked
        while self._unconfirmed and self._unconfirmed[0].settled:
            self._unconfirmed.popleft()

    @property
    def node(self) -> str:
        """``host:port`` of the node this publisher uses (or tries first when disconnected)."""
        return node_address(self.urls[self._node])

    def _fail_over(self) -> None:
        """Drop a connection that failed; the next publish tries the next node first (a node
        that accepts connections but does not confirm, cut off from its cluster's majority,
        is not tried again and again)."""
        self.close()
        self._node = (self._node + 1) % len(self.urls)

    def close(self) -> None:
        self._stale = False
        connection, self._connection, self._channel = self._connection, None, None
        for confirmation in self._unconfirmed:
            confirmation.lost = True
        self._unconfirmed.clear()
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
        connection is then dropped (unless a nack was all) and the next call reconnects.
        """
        if messages:
            self.wait(self.send(messages, retry_tier_ms=retry_tier_ms))

    def send(
        self, messages: Sequence[TaskMessage], *, retry_tier_ms: int = 0
    ) -> Confirmation:
        """Publish every message without waiting for their confirms: :meth:`poll` (or
        :meth:`wait`) reads them, and the returned :class:`Confirmation` settles."""
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
        except (OSError, amqp.exceptions.AMQPError) as exc:
            self._fail_over()
            raise DispatchError(f"publishing {len(messages)} messages failed: {exc!r}") from exc
        return self._sent(len(messages))

    def _sent(self, count: int) -> Confirmation:
        """The confirmation of the ``count`` messages just published (their delivery tags)."""
        first_tag = self._next_tag
        self._next_tag += count
        confirmation = Confirmation(count, first_tag, self._next_tag - 1,
                                    waiting=set(range(first_tag, self._next_tag)))
        if confirmation.waiting:
            self._unconfirmed.append(confirmation)
        return confirmation

    def encode(self, messages: Sequence[TaskMessage]) -> list[EncodedMessage]:
        """The frames of ``messages`` for :meth:`send_encoded` (pure: safe from any thread)."""
        return [encode_for_publish(m, origin=self.origin) for m in messages]

    def send_encoded(self, encoded: Sequence[EncodedMessage], published_ms: int) -> Confirmation:
        """Publish messages encoded ahead (:meth:`encode`), stamped ``published_ms``, with one
        write; as :meth:`send` otherwise (confirms read by :meth:`poll`)."""
        for item in encoded:
            item.message.chrono_headers["chrono_published_ms"] = published_ms
        try:
            channel = self._connect()
            if (channel.channel_id != ENCODED_CHANNEL
                    or self._connection.frame_max < ENCODED_FRAME_MAX):
                return self.send([item.message for item in encoded])
            for queue in {item.message.queue for item in encoded} - self._declared:
                declare_queue(channel, queue)
                self._declared.add(queue)
            data = bytearray(b"".join(item.frames for item in encoded))
            offset = 0
            for item in encoded:
                pack_into(">q", data, offset + item.stamp_offset, published_ms)
                offset += len(item.frames)
            self._connection.transport.write(data)
        except (OSError, amqp.exceptions.AMQPError) as exc:
            self._fail_over()
            raise DispatchError(f"publishing {len(encoded)} messages failed: {exc!r}") from exc
        return self._sent(len(encoded))

    def poll(self, timeout_s: float) -> None:
        """Read the confirms that arrive within ``timeout_s`` (returns at the first ones).
        Raises :class:`DispatchError`, the connection dropped, when it failed or when the
        oldest unconfirmed batch waited longer than ``CONFIRM_TIMEOUT_S``."""
        if not self._unconfirmed or self._connection is None:
            return
        waited = time.monotonic() - self._unconfirmed[0].sent_at
        if waited > CONFIRM_TIMEOUT_S:
            self._fail_over()
            raise DispatchError(f"no confirm in {CONFIRM_TIMEOUT_S} s")
        try:
            # Not 0: py-amqp makes the socket non-blocking then, which it does not expect.
            self._connection.drain_events(timeout=max(timeout_s, 0.0005))
        except TimeoutError:
            return
        except (OSError, amqp.exceptions.AMQPError) as exc:
            self._fail_over()
            raise DispatchError(f"reading confirms failed: {exc!r}") from exc

    def wait(self, confirmation: Confirmation) -> None:
        """Return once every message of ``confirmation`` was confirmed; raises
        :class:`DispatchError` when one was nacked or the confirms did not come."""
        deadline = confirmation.sent_at + CONFIRM_TIMEOUT_S
        while not confirmation.settled:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail_over()
                raise DispatchError(f"no confirm for tag {confirmation.last_tag} in "
                                    f"{CONFIRM_TIMEOUT_S} s")
            self.poll(remaining)
        confirmation.raise_if_failed()
