"""This process's Redis client: one connection pool to ``redis_url``, shared by whatever needs it.

The timer store (:func:`scheduler.timers.timer_store`) is built on it, and so are the API's rate
limit and pending-job quota: one pool, one server.

With ``CHRONO_REDIS_CLUSTER`` on, ``redis_url`` names one or several nodes of a Redis Cluster
(``redis://:pw@n1:6379,n2:6379/0``, tried in turn for the slot map) and the client is redis-py's
:class:`redis.RedisCluster` (a pool per node, commands routed by key slot, the slot map
refreshed after a failover). The two differ where Chrono's code meets them, and this
module holds what bridges it: :func:`connect` for every client Chrono builds (a pub/sub
listener's, a probe's with short time-outs), :func:`register_script` for Lua scripts that run in
pipelines, and :func:`database_of` for the database a client's announcements are scoped to.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cache
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode
from redis.commands.core import Script
from redis.exceptions import RedisClusterException

# get_config() here: the process's one Redis pool, made on first use by whatever needs it first:
# the process edge, nothing owns it to hand it a configuration.
from chronocore.config import get_config, redis_hosts
from chronocore.credentials import host_text
from chronocore.errors import RedisUnavailable

log = logging.getLogger("chrono.redis")

# Either client; a pipeline of each is an instance of its client's class too.
RedisClient = redis.Redis | redis.RedisCluster


def socket_timeout_s() -> float:
    """How long a client of Chrono's waits on a connection or a reply before it fails like an
    outage (``redis_socket_timeout_ms``, 2 s). Without it a node that hangs (stopped, or
    behind a network that drops rather than refuses) holds every thread waiting on it for good:
    a beat's loop and keeper after a Redis Cluster had failed the node over, with jobs due on
    every other node (tests/cluster/test_redis_cluster.py, a primary hung: the jobs went out at
    most 4.2-4.5 s late with 2 s, 10.2 s with 5 s, the cluster failing over in 2.6-3.7 s). A
    command that timed out may have run, which its caller's retry tolerates (a claim's timers
    are claimed again after their ack deadline)."""
    return get_config().redis_socket_timeout_ms / 1000


def connect(url: str, *, cluster: bool, **options: object) -> RedisClient:
    """A new client of ``url``: a :class:`redis.RedisCluster` when ``cluster``, else a
    :class:`redis.Redis`; ``options`` are either's keyword arguments, over the defaults
    (``socket_timeout`` and ``socket_connect_timeout`` :func:`socket_timeout_s`).

    A cluster client reads the slot map when it is made, from the first of the URL's nodes that
    answers within the time-out, so it fails here, with :class:`RedisUnavailable`, when none
    does; a single server's connects on first use."""
    timeout_s = socket_timeout_s()
    options = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s, **options}
    if cluster:
        first_url, nodes = cluster_startup(url)
        try:
            return redis.RedisCluster.from_url(first_url, startup_nodes=nodes, **options)
        except RedisClusterException as exc:
            raise RedisUnavailable(f"Redis Cluster of REDIS_URL: {exc}") from exc
    return redis.Redis.from_url(url, **options)


def cluster_startup(url: str) -> tuple[str, list[ClusterNode]]:
    """A cluster ``url`` of one or several nodes as redis-py takes it: the URL of its first
    node alone (redis-py reads the password and options from it, and fails on a list) and
    every node, in the URL's order (:func:`chronocore.config.redis_hosts`). A client whose
    first node hangs, at its start, asks the next one for the slot map: with one node named,
    a process started while that node hung could not reach the cluster at all."""
    parts = urlsplit(url)
    userinfo, hosts = redis_hosts(url)
    first = host_text(*hosts[0])
    netloc = f"{userinfo}@{first}" if userinfo else first
    return (urlunsplit(parts._replace(netloc=netloc)),
            [ClusterNode(host, port) for host, port in hosts])


@cache
def redis_client() -> RedisClient:
    """This process's client (made on first use; ``redis_client.cache_clear()`` drops it)."""
    config = get_config()
    return connect(config.redis_url, cluster=config.redis_cluster)


def is_cluster(client: RedisClient) -> bool:
    """Whether ``client`` (or pipeline) talks to a Redis Cluster."""
    return isinstance(client, redis.RedisCluster)


def by_node(client: RedisClient, keys: Sequence[str]) -> dict[str, list[int]]:
    """The indexes of ``keys`` by the name of the node that serves each, in the order of each
    node's first key (one group, named "", on a single server). A pipeline run a group at a
    time fails a node at a time: redis-py's cluster pipeline raises for all of its nodes when
    it cannot take one's connection."""
    if not is_cluster(client):
        return {"": list(range(len(keys)))}
    groups: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(client.get_node_from_key(key).name, []).append(index)
    return groups


def refresh_slots(client: RedisClient) -> None:
    """Read a Redis Cluster client's slot map again from the nodes it knows (nothing on one
    server), for a client that only listens (a pub/sub subscription never refreshes it, and the
    node it names may have been failed over). Only for a client no other thread uses: redis-py
    disconnects the client's connection pools while it reads. No node answering is left to the
    next attempt."""
    if not is_cluster(client):
        return
    try:
        client.nodes_manager.initialize()
    except (redis.RedisError, RedisClusterException) as exc:
        log.warning("could not read the Redis Cluster's slot map again: %r", exc)


def database_of(client: RedisClient) -> int | None:
    """The database index ``client`` uses, or None on a cluster (whose only database is 0,
    and whose pub/sub is not shared with anything else: a cluster holds one deployment)."""
    if is_cluster(client):
        return None
    return int(client.get_connection_kwargs().get("db") or 0)


class ClusterScript:
    """A Lua script run with ``EVAL`` (its source every call) on a Redis Cluster.

    redis-py refuses ``EVALSHA`` inside a cluster pipeline (``Script`` objects only load
    themselves into a single server's pipeline), and a replica promoted by a failover starts
    with an empty script cache (Redis replicates a script's effects, not ``SCRIPT LOAD``), so a
    SHA known to the old primary would fail on the new one. ``EVAL`` carries the script, and the
    server caches it compiled by its SHA: the cost is the source's bytes on the wire (1-2 KB
    per shard per call for the timer store's scripts).
    """

    def __init__(self, client: redis.RedisCluster, source: str) -> None:
        self.registered_client = client
        self.source = source

    def __call__(self, keys: Sequence[object] = (), args: Sequence[object] = (),
                 client: RedisClient | None = None):
        target = self.registered_client if client is None else client
        return target.execute_command("EVAL", self.source, len(keys), *keys, *args)


def register_script(client: RedisClient, source: str) -> Script | ClusterScript:
    """``client.register_script(source)``, or a :class:`ClusterScript` on a cluster; either is
    called as ``script(keys=…, args=…, client=pipeline)``."""
    if is_cluster(client):
        return ClusterScript(client, source)
    return client.register_script(source)
