"""The announcement channels, scoped to the deployment: ``announce`` (timers added inside the
beat's look-ahead, for their owner's wheel: :mod:`scheduler.timers`, :mod:`scheduler.beat`) and
``cancel`` (running executions to stop, for the workers running them:
:mod:`scheduler.lifecycle`, :mod:`scheduler.leases`).

A Redis pub/sub channel belongs to the whole server, not to a database: two deployments on
databases 1 and 2 of one Redis would hear each other's announcements (a beat inserting another
deployment's timer ids in its wheel, a worker told to stop an execution id it does not hold).
So on one server a channel's name carries the database index (``chrono:db<N>:announce``), the
deployment's scope there: its keys are not prefixed, so two deployments can never share one
database, and a deployment name would scope nothing the database does not.

On a Redis Cluster (one deployment per cluster: its only database is 0) the channels are
sharded ones (``SPUBLISH``/``SSUBSCRIBE``, Redis 7): a message goes to the nodes of the one
shard that serves the channel's slot, not to every node of the cluster as a plain ``PUBLISH``
does, and a subscriber listens on that shard. redis-py has both commands; its
``ClusterPubSub.get_sharded_message`` ignores its time-out unless it is given the node, so a
:class:`Subscription` subscribes on the node's own client (the same thing, with the wait).

Announcements are a shortcut, never the only way: a beat rescans after losing its listener,
and a worker sees a cancellation at its next lease renewal.

A subscription's connection is silent while nothing is published, so a node that hangs (a
stopped process, a host behind a network that drops packets) would leave it deaf for good:
after a failover its channel is served elsewhere, and the beat would lean on its scans, a
worker on its renewals, until the process restarts. So a :class:`Subscription` pings every
``PING_INTERVAL_S`` and gives the connection up when the pong is not back within the clients'
socket time-out (:func:`chronocore.redis_client.socket_timeout_s`).
"""

from __future__ import annotations

import time

import redis
from redis.exceptions import RedisClusterException

from chronocore.redis_client import RedisClient, database_of, is_cluster, socket_timeout_s

PING_INTERVAL_S = 1.0

ANNOUNCE = "announce"
CANCEL = "cancel"
KINDS = (ANNOUNCE, CANCEL)


def channel_name(kind: str, *, database: int | None) -> str:
    """The channel of ``kind`` for a deployment on ``database`` of one server, or on a cluster
    (``database`` None)."""
    if kind not in KINDS:
        raise ValueError(f"unknown announcement kind {kind!r}: one of {', '.join(KINDS)}")
    if database is None:
        return f"chrono:{kind}"
    if database < 0:
        raise ValueError(f"a Redis database index is never negative, got {database}")
    return f"chrono:db{database}:{kind}"


def channel_for(kind: str, client: RedisClient) -> str:
    """The channel of ``kind`` for the deployment ``client`` belongs to."""
    return channel_name(kind, database=database_of(client))


def publish(client: RedisClient, channel: str, message: str) -> None:
    """Send ``message`` on ``channel`` through ``client`` or a pipeline of it (queued there)."""
    if is_cluster(client):
        client.spublish(channel, message)
    else:
        client.publish(channel, message)


class Subscription:
    """A listener of one channel on a connection of its own.

    :meth:`get` raises :class:`redis.ConnectionError` once the subscription is gone (the server
    went away, stopped answering its pings, or a cluster moved the channel's slot and ended it
    with ``sunsubscribe``); the caller then makes a new one, on the shard's primary of the
    moment.
    """

    def __init__(self, client: RedisClient, channel: str) -> None:
        self.channel = channel
        self._ping_at = time.monotonic() + PING_INTERVAL_S
        self._pinged_at: float | None = None  # a ping's pong awaited since
        try:
            if is_cluster(client):
                # The node the client's slot map names, never a refresh of that map from here:
                # redis-py's NodesManager.initialize() disconnects the connection pools other
                # threads of the process are using. After a failover the map is refreshed by
                # the client itself on its first error, and a subscription made on the dead
                # node fails and is made again.
                node = client.get_node_from_key(channel)
                self._pubsub = client.get_redis_connection(node).pubsub()
                self._pubsub.ssubscribe(channel)
            else:
                self._pubsub = client.pubsub()
                self._pubsub.subscribe(channel)
        except RedisClusterException as exc:  # no node reachable: not a RedisError
            raise redis.ConnectionError(f"subscribing to {channel}: {exc}") from exc

    def get(self, timeout_s: float) -> bytes | None:
        """The next message's data, or None when none came within ``timeout_s``."""
        if self._pinged_at is None and time.monotonic() >= self._ping_at:
            self._pubsub.ping()
            self._pinged_at = time.monotonic()
        message = self._pubsub.get_message(timeout=timeout_s)
        if message is None:
            # Looked at only once nothing is left to read: a pong that waited unread (this
            # thread held up) is never taken for a silence.
            if self._pinged_at is not None:
                silent_s = time.monotonic() - self._pinged_at
                if silent_s > socket_timeout_s():
                    raise redis.ConnectionError(f"no pong on the subscription to {self.channel} "
                                                f"for {silent_s:.1f} s: its server hangs")
            return None
        kind = message["type"]
        if kind in ("message", "smessage"):
            return message["data"]
        if kind == "pong":
            self._pinged_at = None
            self._ping_at = time.monotonic() + PING_INTERVAL_S
            return None
        if kind in ("unsubscribe", "sunsubscribe"):
            raise redis.ConnectionError(
                f"the server ended the subscription to {self.channel} (its slot moved)")
        return None  # the subscription's confirmation

    def close(self) -> None:
        self._pubsub.close()
