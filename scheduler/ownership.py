"""Shard ownership of one beat replica: membership heartbeats, fenced leases, hand-over.

Every replica heartbeats into ``chrono:replicas`` (ZSET, member = replica id, score = the time its
membership expires) and computes the same shard → replica map from the live members by rendezvous
hashing (:mod:`scheduler.sharding`). It then holds a lease on each shard the map gives it; the lease
value carries a fencing token that every claim checks inside Redis, so a replica that was paused or
cut off past its lease claims nothing when it wakes, until it acquires a fresh lease.

Two threads share it: the beat's loop maps, acquires and hands over (:meth:`refresh`,
:meth:`release`); a keeper thread heartbeats and renews (:meth:`renew`), so that a loop busy
preparing a burst for seconds, or waiting on a slow statement, loses no lease. ``leases`` is
therefore never changed in place: every change builds a new dict under a lock, and a reader's
``leases`` is a consistent view.

A shard the map moves away is not released at once: it is *leaving* — no longer claimed, still
renewed — until what was claimed from it is published, recorded and acknowledged under its lease
(the beat asks the firer and the recorder), then released; the next owner, which retries its
acquire every ``ACQUIRE_RETRY_MS`` while the map promises it a shard it lacks, takes it within
a tenth of a second. A hand-over thus delays nothing by an ack deadline, and publishes nothing
twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import redis

from chronocore.redis_client import RedisClient, by_node
from scheduler.sharding import shard_tag, shards_owned_by
from scheduler.timers import TimerStore

REPLICAS_KEY = "chrono:replicas"
# While the map gives this replica shards it does not hold yet (another replica is handing them
# over), it tries to acquire them this often rather than at its next refresh.
ACQUIRE_RETRY_MS = 100

log = logging.getLogger("chrono.beat")
T = TypeVar("T")


@dataclass
class OwnershipChange:
    gained: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    leaving: list[int] = field(default_factory=list)  # moved away by the map, being handed over


def _lease_keys(shard: int) -> tuple[str, str]:
    tag = shard_tag(shard)
    return f"{tag}:lease", f"{tag}:fence"


class ShardOwnership:
    """The shards one replica holds, as ``{shard: lease value}``."""

    def __init__(self, store: TimerStore, *, replica_id: str, lease_ttl_ms: int) -> None:
        if "|" in replica_id:
            raise ValueError("a replica id cannot contain '|'")
        self.store = store
        self.replica_id = replica_id
        self.lease_ttl_ms = lease_ttl_ms
        # {shard: lease value}, replaced whole under ``_lock`` (never changed in place).
        self.leases: dict[int, str] = {}
        # Held shards the map gave to another replica: not claimed, released once drained.
        self.leaving: dict[int, float] = {}  # shard -> monotonic time it started leaving
        # Shards the map gives this replica that it could not acquire yet.
        self.wanted: frozenset[int] = frozenset()
        # When each lease was last acquired or renewed, by this process's monotonic clock.
        self._renewed_at: dict[int, float] = {}
        # Shards whose renewal the keeper found lost, for the loop's next refresh.
        self.lost: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._member = True  # False once the membership was withdrawn (a clean stop)
        # A Redis Cluster node's renewal still running, by by_node's name (see renew).
        self._renewing: dict[str, futures.Future[list[int]]] = {}
        self._node_clients: dict[str, RedisClient] = {}  # see _node_client

    @property
    def claimable(self) -> dict[int, str]:
        """The held shards to claim timers from: all but the leaving ones."""
        leases, leaving = self.leases, self.leaving
        return {s: v for s, v in leases.items() if s not in leaving} if leaving else leases

    def _remove(self, shards, *, only_if: dict[int, str] | None = None) -> list[int]:
        """Drop ``shards`` from the held leases (those still holding ``only_if``'s value when
        given); returns the ones dropped."""
        with self._lock:
            leases = dict(self.leases)
            dropped = [s for s in shards if s in leases
                       and (only_if is None or leases[s] == only_if.get(s))]
            for shard in dropped:
                del leases[shard]
                self.leaving.pop(shard, None)
            self.leases = leases
        return dropped

    def live_replicas(self, now_ms: int) -> list[str]:
        client = self.store.client
        pipe = client.pipeline(transaction=False)
        if self._member:
            pipe.zadd(REPLICAS_KEY, {self.replica_id: now_ms + self.lease_ttl_ms})
        pipe.zremrangebyscore(REPLICAS_KEY, "-inf", now_ms)
        pipe.zrange(REPLICAS_KEY, 0, -1)
        return [member.decode() for member in pipe.execute()[-1]]

    def refresh(self, now_ms: int) -> OwnershipChange:
        """Heartbeat, map the shards, mark the ones moved away leaving (the beat releases each
        once drained), acquire the ones moved here; report the leases the keeper lost."""
        target = set(
            shards_owned_by(self.replica_id, self.live_replicas(now_ms), self.store.shard_count)
        )
        change = OwnershipChange(lost=drain(self.lost))
        held = set(self.leases)
        with self._lock:
            leaving = dict(self.leaving)
            for shard in held & target & set(leaving):
                del leaving[shard]  # the map gave it back before it was handed over
            change.leaving = sorted(held - target - set(leaving))
            started = time.monotonic()
            leaving.update(dict.fromkeys(change.leaving, started))
            self.leaving = leaving
        change.gained += self._acquire(sorted(target - held))
        self.wanted = frozenset(target - set(self.leases))
        if change.gained or change.lost or change.leaving:
            log.info(
                "replica %s: +%d shards, -%d shards, handing over %d, holds %d",
                self.replica_id, len(change.gained), len(change.lost), len(change.leaving),
                len(self.leases),
            )
        return change

    def renew(self, now_ms: int) -> list[int]:
        """The keeper's beat: heartbeat the membership and renew every held lease (leaving ones
        included: they are published under it until handed over). Returns the shards found
        lost, which are also queued for the loop's next :meth:`refresh`.

        On a Redis Cluster each node's renewals go in a thread of their own, waited for up to a
        fifth of the lease's TTL: a node down or hung fails or holds its own shards' renewals
        rather than everyone's, so the leases on the live nodes do not lapse with it while the
        cluster fails it over. A node whose renewal is still running (on a hung node, its
        socket time-outs and their retries) is skipped until it ends; its result, or its
        error, is reported by the call that finds it ended. Each node's renewals go on a
        client of their own (:meth:`_node_client`)."""
        leases = self.leases
        held = sorted(leases)
        keys = [REPLICAS_KEY, *(_lease_keys(shard)[0] for shard in held)]
        work = {node: ([held[i - 1] for i in group if i], 0 in group)
                for node, group in by_node(self.store.client, keys).items()}
        if len(work) == 1:  # one server (or one node): nothing to keep apart
            [(shards, heartbeat)] = work.values()
            return self._renew_and_note(leases, shards, heartbeat=heartbeat, now_ms=now_ms)
        started = {node: _in_thread(partial(self._renew_and_note, leases, shards,
                                            heartbeat=heartbeat, now_ms=now_ms,
                                            client=self._node_client(node)))
                   for node, (shards, heartbeat) in work.items() if node not in self._renewing}
        self._renewing.update(started)
        futures.wait(started.values(), timeout=self.lease_ttl_ms / 5000)
        lost: list[int] = []
        failure: BaseException | None = None
        for node, future in list(self._renewing.items()):
            if future.done():
                del self._renewing[node]
                if future.exception() is None:
                    lost += future.result()
                else:
                    failure = failure or future.exception()
        if failure is not None:
            raise failure
        return lost

    def _node_client(self, node: str) -> RedisClient:
        """A client of its own for one Redis Cluster node's renewals (a plain one, to that node
        alone, with the cluster client's options). Threads sharing the cluster client broke
        each other's commands: a thread that meets a node down reads the slot map again, and
        redis-py then disconnects the connections every other thread is using (an
        ``AttributeError`` in their ``sendall``). A renewal sent here after the slot moved is
        refused (MOVED) and counted a failure of that node; the next renewal goes to the node
        the cluster client's map then names."""
        client = self._node_clients.get(node)
        if client is None:
            pool = self.store.client.get_node(node_name=node).redis_connection.connection_pool
            options = {k: v for k, v in pool.connection_kwargs.items()
                       if k != "redis_connect_func"}  # the cluster client's own hook
            client = self._node_clients[node] = redis.Redis(connection_pool=redis.ConnectionPool(
                connection_class=pool.connection_class, **options))
        return client

    def _renew_and_note(self, leases: dict[int, str], shards: list[int], *, heartbeat: bool,
                        now_ms: int, client: RedisClient | None = None) -> list[int]:
        """:meth:`_renew_group` (on ``client``, by default the store's), then the leases found
        lost dropped (those still holding ``leases``' value), logged and queued for the loop;
        returns them."""
        found_lost = self._renew_group(leases, shards, heartbeat=heartbeat, now_ms=now_ms,
                                       client=client)
        lost = self._remove(found_lost, only_if=leases)
        for shard in lost:
            log.warning("replica %s lost its lease on shard %d", self.replica_id, shard)
            self.lost.put(shard)
        return lost

    def _renew_group(self, leases: dict[int, str], shards: list[int], *, heartbeat: bool,
                     now_ms: int, client: RedisClient | None = None) -> list[int]:
        """Renew ``shards`` under ``leases`` (and heartbeat the membership) in one round trip;
        returns those whose lease was found lost."""
        pipe = (client or self.store.client).pipeline(transaction=False)
        heartbeat = heartbeat and self._member
        if heartbeat:
            pipe.zadd(REPLICAS_KEY, {self.replica_id: now_ms + self.lease_ttl_ms})
        for shard in shards:
            self.store.renew_lease_script(
                keys=[_lease_keys(shard)[0]],
                args=[leases[shard], self.lease_ttl_ms],
                client=pipe,
            )
        sent_at = time.monotonic()
        replies = pipe.execute()[1 if heartbeat else 0:]
        lost = []
        for shard, ok in zip(shards, replies, strict=True):
            if ok:
                self._renewed_at[shard] = sent_at
            else:
                lost.append(shard)
        return lost

    def _acquire(self, shards: list[int]) -> list[int]:
        if not shards:
            return []
        pipe = self.store.client.pipeline(transaction=False)
        for shard in shards:
            self.store.acquire_lease_script(
                keys=list(_lease_keys(shard)),
                args=[self.replica_id, self.lease_ttl_ms],
                client=pipe,
            )
        sent_at = time.monotonic()
        gained = {}
        for shard, value in zip(shards, pipe.execute(), strict=True):
            if value:
                gained[shard] = value.decode()
                self._renewed_at[shard] = sent_at
        if gained:
            with self._lock:
                self.leases = {**self.leases, **gained}
        return list(gained)

    def release(self, shards: list[int]) -> list[int]:
        """Give up ``shards`` (a clean stop, or handed over); returns them."""
        leases = self.leases
        shards = [s for s in shards if s in leases]
        if not shards:
            return []
        self._remove(shards)
        pipe = self.store.client.pipeline(transaction=False)
        for shard in shards:
            self.store.release_lease_script(
                keys=[_lease_keys(shard)[0]], args=[leases[shard]], client=pipe
            )
        pipe.execute()
        return shards

    def surely_held(self, shard: int) -> bool:
        """True while this replica's lease on ``shard`` cannot have expired in Redis yet.

        Measured from when the last acquire or renew was *sent*, by the monotonic clock, with a
        safety margin of a fifth of the TTL for clock-rate drift. A replica checks this right
        before publishing what it claimed: after a pause (GC, SIGSTOP) longer than the lease it
        publishes nothing, and leaves its claimed timers to the shard's next owner.
        """
        renewed_at = self._renewed_at.get(shard)
        if renewed_at is None or shard not in self.leases:
            return False
        margin_s = self.lease_ttl_ms / 5000
        return time.monotonic() < renewed_at + self.lease_ttl_ms / 1000 - margin_s

    def drop(self, shards: list[int]) -> None:
        """Forget shards whose lease a claim or ack found lost (fenced)."""
        for shard in self._remove(shards):
            log.warning("replica %s was fenced off shard %d", self.replica_id, shard)

    def withdraw_membership(self) -> None:
        """The start of a clean stop: leave the membership (the others map this replica's
        shards to themselves and try to acquire them) while the leases are still held and what
        was claimed under them is published."""
        self._member = False
        self.store.client.zrem(REPLICAS_KEY, self.replica_id)

    def leave(self) -> None:
        """The end of a clean stop: release every lease and the membership, so others take
        over at once."""
        self.release(sorted(self.leases))
        self.store.client.zrem(REPLICAS_KEY, self.replica_id)


def _in_thread(call: Callable[[], T]) -> futures.Future[T]:
    """``call`` run in a daemon thread of its own, its outcome in the future returned: a
    renewal blocked on a hung node must not hold the process's exit, as a pool's worker
    would (``concurrent.futures`` joins them at exit)."""
    future: futures.Future[T] = futures.Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
            future.set_exception(exc)

    threading.Thread(target=run, name="chrono-lease-renewal", daemon=True).start()
    return future


def drain(items: queue.SimpleQueue) -> list:
    """Everything waiting in ``items`` now, without blocking (the beat's queues between its
    threads, and this module's lost shards)."""
    drained = []
    while True:
        try:
            drained.append(items.get_nowait())
        except queue.Empty:
            return drained
