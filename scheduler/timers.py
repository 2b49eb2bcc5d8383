"""The Redis timer store: every pending occurrence of every job, sharded, with fenced claims.

Data model (all keys of shard ``s`` share the hash tag ``{chrono:s}``, so the store is ready for
Redis Cluster):

``{chrono:s}:due``       ZSET, member = timer id (the job id), score = fire time in epoch ms.
                         One member per job: re-adding a job moves its timer, never doubles it.
``{chrono:s}:inflight``  ZSET, member = timer id, score = ack deadline in epoch ms. A timer sits
                         here between claim and ack; past its deadline the shard's owner claims it
                         again (the claimer died before acknowledging).
``{chrono:s}:claimed``   HASH, timer id -> fire time of the claimed occurrence.
``{chrono:s}:lease``     STRING ``"<replica id>|<fencing token>"`` with a TTL: who may claim.
``{chrono:s}:fence``     STRING counter bumped on every lease acquire.
``chrono:db<N>:announce`` pub/sub channel (``chrono:announce``, sharded, on a Redis Cluster:
                         :mod:`scheduler.announcements`): timers added inside the beat's
                         look-ahead window are announced here so their owner inserts them in
                         its wheel at once.

On a Redis Cluster every script's keys are one shard's (one slot); a pipeline spreads over the
nodes by slot, and the scripts run with ``EVAL`` (:class:`chronocore.redis_client.ClusterScript`).

Redis is an index, PostgreSQL the truth: everything here can be rebuilt from the jobs table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

import redis

from chronocore.config import get_config
from chronocore.redis_client import RedisClient, connect, redis_client, register_script
from scheduler import announcements
from scheduler.sharding import shard_for, shard_tag

LUA_DIR = Path(__file__).with_name("lua")

# A shard's node down or not serving it (a Redis Cluster's node killed, the cluster refusing
# commands until a replica is promoted): that shard's claim fails, the others' stand.
UNSERVED = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterDownError)


@dataclass(frozen=True, slots=True)
class ClaimedTimer:
    """A timer claimed for publishing: the job it belongs to and the occurrence's fire time."""

    timer_id: str
    fire_at_ms: int
    shard: int
    redelivered: bool


class Claim(NamedTuple):
    """What one :meth:`TimerStore.claim_due` call claimed; the shards whose lease turned out lost
    (nothing was claimed from those); and the error of each shard whose node could not be
    reached. Only a Redis Cluster has the last: a dead node's shards fail, the other nodes'
    claims stand and go out (a single server down fails the whole call)."""

    timers: list[ClaimedTimer]
    fenced: list[int]
    unreachable: dict[int, Exception]


@cache
def _lua_source(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text()


def shard_keys(shard: int) -> tuple[str, str, str, str]:
    """``(due, inflight, claimed, lease)`` keys of one shard, in the order the scripts take them."""
    tag = shard_tag(shard)
    return f"{tag}:due", f"{tag}:inflight", f"{tag}:claimed", f"{tag}:lease"


class TimerStore:
    """Adds, removes, claims and acknowledges timers; every batch is one pipelined round trip."""

    def __init__(self, client: RedisClient, *, shard_count: int) -> None:
        self.client = client
        self.shard_count = shard_count
        self.announce_channel = announcements.channel_for(announcements.ANNOUNCE, client)
        self._claim = register_script(client, _lua_source("claim_due"))
        self._ack = register_script(client, _lua_source("ack"))
        self.acquire_lease_script = register_script(client, _lua_source("acquire_lease"))
        self.renew_lease_script = register_script(client, _lua_source("renew_lease"))
        self.release_lease_script = register_script(client, _lua_source("release_lease"))
        self.scores_script = register_script(client, _lua_source("scores"))

    @classmethod
    def from_url(cls, url: str, *, shard_count: int, cluster: bool = False) -> TimerStore:
        return cls(connect(url, cluster=cluster), shard_count=shard_count)

    def shard_of(self, timer_id: str) -> int:
        return shard_for(timer_id, self.shard_count)

    # -- writes from the API side ---------------------------------------------------------

    def add(
        self,
        timers: Iterable[tuple[str, int]],
        *,
        announce_before_ms: int | None = None,
    ) -> int:
        """Add or move timers ``(timer id, fire ms)``; announce those firing before
        ``announce_before_ms`` to the beat replicas. Returns how many were written."""
        by_shard: dict[int, dict[str, int]] = defaultdict(dict)
        announce: list[str] = []
        for timer_id, fire_at_ms in timers:
            shard = self.shard_of(timer_id)
            by_shard[shard][timer_id] = fire_at_ms
            if announce_before_ms is not None and fire_at_ms < announce_before_ms:
                announce.append(f"{shard} {timer_id} {fire_at_ms}")
        if not by_shard:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for shard, mapping in by_shard.items():
            pipe.zadd(shard_keys(shard)[0], mapping)
        if announce:
            announcements.publish(pipe, self.announce_channel, "\n".join(announce))
        pipe.execute()
        return sum(len(mapping) for mapping in by_shard.values())

    def remove(self, timer_ids: Iterable[str]) -> int:
        """Remove pending timers (cancel, pause). An occurrence already claimed is not touched:
        the dispatcher re-checks the job's status in PostgreSQL before it publishes."""
        pipe = self.client.pipeline(transaction=False)
        count = 0
        for timer_id in timer_ids:
            pipe.zrem(shard_keys(self.shard_of(timer_id))[0], timer_id)
            count += 1
        if not count:
            return 0
        return sum(pipe.execute())

    def fire_time_of(self, timer_id: str) -> int | None:
        score = self.client.zscore(shard_keys(self.shard_of(timer_id))[0], timer_id)
        return None if score is None else int(score)

    # -- reads and claims from the beat side ------------------------------------------------

    def window(
        self, shards: Sequence[int], *, until_ms: int, limit: int
    ) -> dict[int, list[tuple[str, int]]]:
        """The timers of ``shards`` firing at or before ``until_ms``, at most ``limit`` a shard
        (the earliest first), as ``{shard: [(timer id, fire ms), …]}``."""
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.zrangebyscore(
                shard_keys(shard)[0], "-inf", until_ms, start=0, num=limit, withscores=True
            )
        result: dict[int, list[tuple[str, int]]] = {}
        for shard, rows in zip(shards, pipe.execute(), strict=True):
            if rows:
                result[shard] = [(member.decode(), int(score)) for member, score in rows]
        return result

    def shards_with_expired_inflight(self, shards: Sequence[int], *, now_ms: int) -> list[int]:
        """Shards holding claimed-but-unacknowledged timers whose ack deadline has passed."""
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.zrangebyscore(shard_keys(shard)[1], "-inf", now_ms, start=0, num=1)
        return [s for s, rows in zip(shards, pipe.execute(), strict=True) if rows]

    def claim_due(
        self,
        leases: dict[int, str],
        shards: Iterable[int],
        *,
        now_ms: int,
        ack_deadline_ms: int,
        limit: int,
        reclaim_before_ms: dict[int, int] | None = None,
    ) -> Claim:
        """Claim the due timers of ``shards`` in one round trip (a :class:`Claim`).

        A claimed timer is claimed again once its ack deadline passed, or, in a shard of
        ``reclaim_before_ms``, once its deadline is before that shard's time there: a replica
        that took a shard over gives the time it took it plus the ack deadline, so that what the
        previous owner claimed and never acknowledged goes out now, not after the deadline (its
        fencing token makes the previous owner's acks and claims harmless)."""
        shards = [s for s in shards if s in leases]
        reclaim_before_ms = reclaim_before_ms or {}
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            self._claim(
                keys=shard_keys(shard),
                args=[leases[shard], now_ms, now_ms + ack_deadline_ms, limit,
                      max(now_ms, reclaim_before_ms.get(shard, now_ms))],
                client=pipe,
            )
        claimed: list[ClaimedTimer] = []
        fenced: list[int] = []
        unreachable: dict[int, Exception] = {}
        for shard, reply in zip(shards, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(reply, UNSERVED):
                unreachable[shard] = reply
                continue
            if _fenced(reply):
                fenced.append(shard)
                continue
            for i in range(0, len(reply), 3):
                claimed.append(
                    ClaimedTimer(
                        timer_id=reply[i].decode(),
                        fire_at_ms=int(float(reply[i + 1])),
                        shard=shard,
                        redelivered=bool(int(reply[i + 2])),
                    )
                )
        return Claim(claimed, fenced, unreachable)

    def ack(
        self,
        leases: dict[int, str],
        acks: Iterable[tuple[ClaimedTimer, int | None]],
    ) -> list[int]:
        """Acknowledge published timers, re-adding each one's next fire time when given.
        Returns the shards whose lease was lost (their timers stay inflight and are published
        again by the shard's next owner)."""
        by_shard: dict[int, list[str | int]] = defaultdict(list)
        for timer, next_fire_ms in acks:
            by_shard[timer.shard] += [
                timer.timer_id,
                timer.fire_at_ms,
                "" if next_fire_ms is None else next_fire_ms,
            ]
        shards = [s for s in by_shard if s in leases]
        if not shards:
            return []
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            self._ack(keys=shard_keys(shard), args=[leases[shard], *by_shard[shard]], client=pipe)
        fenced = []
        for shard, reply in zip(shards, pipe.execute(raise_on_error=False), strict=True):
            if _fenced(reply):
                fenced.append(shard)
        return fenced

    def pending_count(self) -> int:
        """Timers waiting in every shard (due plus inflight); one pipelined round trip."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.shard_count):
            due, inflight, _, _ = shard_keys(shard)
            pipe.zcard(due)
            pipe.zcard(inflight)
        return sum(pipe.execute())


def _fenced(reply: object) -> bool:
    """Whether one script's reply in a pipeline run with ``raise_on_error=False`` is its FENCED
    refusal. Any other error in its place is raised: a script's own, or, on a Redis Cluster, the
    connection error of a node that died (redis-py's cluster pipeline puts a node's
    ``ConnectionError`` in the place of each of its commands' replies rather than raising it)."""
    if not isinstance(reply, Exception):
        return False
    if isinstance(reply, redis.ResponseError) and "FENCED" in str(reply):
        return True
    raise reply


@cache
def timer_store() -> TimerStore:
    """This process's timer store, on its one Redis pool (:func:`chronocore.redis_client.
    redis_client`; ``timer_store.cache_clear()`` drops it). The beat and the reaper are handed
    theirs by their commands; this is for what has no owner to be handed one by: the Python API,
    the REST views and Celery tasks of any app, so the configuration is read here, once."""
    return TimerStore(redis_client(), shard_count=get_config().shard_count)
