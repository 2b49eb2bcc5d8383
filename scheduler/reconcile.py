"""Keeping the Redis timer store true to PostgreSQL: the reconciler and ``rebuild-timers``.

PostgreSQL is the truth and Redis an index. Every pending job (``ACTIVE`` with a ``next_run_at``)
must have its timer at that time in its shard's ``due`` set, unless the beat holds it ``inflight``.
The reconciler compares one shard at a time and adds what is missing or moves what is wrong; it
never removes: a stale timer (its job cancelled, completed or moved since) is harmless, because the
beat checks the job in PostgreSQL when the timer comes due and drops it.

Shards are read by index range (``chrono_job.timer_key``) and their timers looked up by id, so a
shard's comparison costs what its pending jobs cost, whatever else the sorted set holds.

A beat's :class:`Reconciler` goes round its shards one every ``reconcile_shard_interval_ms``
(two seconds: ten minutes for 256 shards), which is drift repair, not disaster repair. When
Redis may have gone back in time it compares every owned shard at once instead: when the
server's run id changes (a restart, which replays the AOF and loses up to its last second), or
on a Redis Cluster when another node serves some of the slots (a replica promoted by a
failover has what the asynchronous replication had sent it: timers added, moved or re-armed on
the old primary in its last milliseconds may be missing). :func:`redis_incarnation` is looked
at every second.

The round robin is slow on purpose, and a timer lost in a crash between a job's commit and its
timer (a worker's engine listener killed right after it wrote a workflow's next step) would wait
for it: up to ten minutes. So the reconciler also looks, every ``OVERDUE_SWEEP_INTERVAL_S`` (or
every round-robin step when that is longer: two seconds by default), at the pending jobs more
than ``OVERDUE_GRACE_MS`` past their fire time (the oldest ``OVERDUE_BATCH``, one range of
``job_status_next_run_idx``: on time, there are none), and repairs those of its shards that have
no timer: such a job fires a few seconds late, not minutes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis
from django.db import DatabaseError, close_old_connections, connection

from chronocore.redis_client import RedisClient, is_cluster
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.models import Job
from scheduler.sharding import shard_for, timer_key_range
from scheduler.timers import TimerStore, shard_keys

REBUILD_BATCH = 10_000
LOOKUP_BATCH = 1_000
INCARNATION_CHECK_INTERVAL_S = 1.0
OVERDUE_SWEEP_INTERVAL_S = 1.0
# Past this, a pending job's timer should have fired: the beat claims within its tick and the
# firer publishes a 10,000-job burst in under a second.
OVERDUE_GRACE_MS = 3_000
OVERDUE_BATCH = 1_000

log = logging.getLogger("chrono.reconcile")


@dataclass
class ReconcileReport:
    checked: int = 0
    added: int = 0
    moved: int = 0

    def __iadd__(self, other: ReconcileReport) -> ReconcileReport:
        self.checked += other.checked
        self.added += other.added
        self.moved += other.moved
        return self


class FullPass:
    """The reconciler's pass over every owned shard after a Redis restart or failover: the
    shards it has left, what it repaired, and its summary once it ends.

    A shard of the pass may leave this replica before its turn: the keeper could not renew its
    lease while a node was down, or the map moved it. It stays in the pass: gained again, it is
    reconciled as a gained shard is, at once, and counts here. The pass ends when every shard
    left in it is another replica's (whose gain reconciles it)."""

    def __init__(self, shards: set[int], *, started: float) -> None:
        self.left = set(shards)
        self.started = started
        self.report = ReconcileReport()

    def note(self, shard: int, report: ReconcileReport) -> None:
        if shard in self.left:
            self.left.discard(shard)
            self.report += report

    def summary(self, owned: frozenset[int], now: float) -> str | None:
        """The line to log once the pass has ended (nothing left of it that this replica
        owns), else None."""
        if self.left & owned:
            return None
        done = self.report
        text = (f"reconciled every owned shard after the Redis restart or failover in "
                f"{now - self.started:.1f} s: {done.checked} timers checked, {done.added} "
                f"missing added, {done.moved} misplaced moved")
        if self.left:
            shards = "1 shard" if len(self.left) == 1 else f"{len(self.left)} shards"
            text += (f"; {shards} left this replica before their turn (their owner reconciles "
                     f"them when it gains them)")
        return text


def pending_timers(shard: int, shard_count: int) -> dict[str, int]:
    """``{job id: next fire ms}`` of the pending jobs of one shard, from PostgreSQL."""
    low, high = timer_key_range(shard, shard_count)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, next_run_at FROM chrono_job WHERE timer_key >= %s AND timer_key < %s "
            "AND status = 'ACTIVE' AND next_run_at IS NOT NULL",
            [low, high],
        )
        return {str(job_id): datetime_to_ms(next_run) for job_id, next_run in cursor.fetchall()}


def reconcile_shard(store: TimerStore, shard: int) -> ReconcileReport:
    """Add the missing timers of one shard and move the ones at a wrong time.

    Reads the shard's pending jobs from PostgreSQL, looks their timers up in Redis with
    ``ZMSCORE`` (cost follows the jobs, not the size of the sorted set), then re-reads the
    candidates in PostgreSQL: a timer the beat fired, or a job edited, in between is left alone
    rather than put back at a time that is no longer the job's."""
    expected = pending_timers(shard, store.shard_count)
    candidates = _differences(store, shard, expected)
    if not candidates:
        return ReconcileReport(checked=len(expected))
    repairs = _repair(store, shard, {job_id: fire_ms
                                     for job_id, (fire_ms, _) in candidates.items()})
    report = ReconcileReport(
        checked=len(expected),
        added=sum(1 for job_id in repairs if candidates[job_id][1] is None),
        moved=sum(1 for job_id in repairs if candidates[job_id][1] is not None),
    )
    if repairs:
        log.warning("shard %d: repaired %d missing and %d misplaced timers", shard,
                    report.added, report.moved)
    return report


def overdue_timers(shards: frozenset[int], shard_count: int, *, now_ms: int,
                   grace_ms: int = OVERDUE_GRACE_MS) -> dict[int, dict[str, int]]:
    """``{shard: {job id: fire ms}}`` of the pending jobs of ``shards`` more than ``grace_ms``
    past their fire time, among the oldest ``OVERDUE_BATCH`` overdue jobs of every shard."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, next_run_at FROM chrono_job WHERE status = 'ACTIVE' "
            "AND next_run_at < %s ORDER BY next_run_at LIMIT %s",
            [ms_to_datetime(now_ms - grace_ms), OVERDUE_BATCH],
        )
        rows = cursor.fetchall()
    found: dict[int, dict[str, int]] = {}
    for job_id, next_run in rows:
        shard = shard_for(str(job_id), shard_count)
        if shard in shards:
            found.setdefault(shard, {})[str(job_id)] = datetime_to_ms(next_run)
    return found


def reconcile_overdue(store: TimerStore, shards: frozenset[int], *,
                      now_ms: int) -> ReconcileReport:
    """Add the missing timers of the overdue jobs of ``shards`` (:func:`overdue_timers`): a
    timer due or inflight is the beat's, left alone; a job fired or edited since it was read is
    left alone as in :func:`reconcile_shard`."""
    report = ReconcileReport()
    for shard, expected in overdue_timers(shards, store.shard_count, now_ms=now_ms).items():
        report.checked += len(expected)
        missing = {job_id: fire_ms for job_id, (fire_ms, current)
                   in _differences(store, shard, expected).items() if current is None}
        repairs = _repair(store, shard, missing) if missing else {}
        if repairs:
            report.added += len(repairs)
            log.warning("shard %d: %d overdue jobs had no timer, added (a crash between a "
                        "job's commit and its timer)", shard, len(repairs))
    return report


def _differences(
    store: TimerStore, shard: int, expected: dict[str, int]
) -> dict[str, tuple[int, int | None]]:
    """``{job id: (expected ms, current ms or None)}`` for timers missing or misplaced."""
    due, inflight, _, _ = shard_keys(shard)
    ids = list(expected)
    found: dict[str, tuple[int, int | None]] = {}
    for offset in range(0, len(ids), LOOKUP_BATCH):
        chunk = ids[offset : offset + LOOKUP_BATCH]
        # Due and inflight as of one instant: one script, not MULTI. On a Redis Cluster a
        # transaction that meets a connection error during a failover leaves redis-py 6.4's
        # slot map with a connection error taken for a redirection, and every later command of
        # every thread of the process fails with AttributeError ('ClusterDownError' object has
        # no attribute 'host'; redis/redis-py#3815 is the same fault in its asyncio client).
        due_scores, inflight_scores = store.scores_script(keys=[due, inflight], args=chunk)
        for job_id, score, claimed in zip(chunk, due_scores, inflight_scores, strict=True):
            if claimed is not None:
                continue  # the beat holds it
            current = None if score is None else int(float(score))  # the script's strings
            if current != expected[job_id]:
                found[job_id] = (expected[job_id], current)
    return found


def _repair(store: TimerStore, shard: int, timers: dict[str, int]) -> dict[str, int]:
    """Write the ``{job id: fire ms}`` timers of ``shard`` whose job is still pending at that
    time when re-read (a timer the beat fired, or a job edited, since is left alone); returns
    what was written."""
    still = _still_pending(timers)
    repairs = {job_id: fire_ms for job_id, fire_ms in timers.items()
               if still.get(job_id) == fire_ms}
    if repairs:
        store.client.zadd(shard_keys(shard)[0], repairs)
    return repairs


def _still_pending(candidates: dict[str, object]) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, next_run_at FROM chrono_job WHERE job_id = ANY(%s) "
            "AND status = 'ACTIVE' AND next_run_at IS NOT NULL",
            [[uuid.UUID(job_id) for job_id in candidates]],
        )
        return {str(job_id): datetime_to_ms(next_run) for job_id, next_run in cursor.fetchall()}


def rebuild_all(store: TimerStore, *, on_batch: Callable[[int], None] | None = None) -> int:
    """Write the timer of every pending job (``chrono rebuild-timers``), in pipelined batches,
    streaming the jobs table; ``on_batch`` is told how many jobs each batch held (a progress
    bar). Returns how many timers were written."""
    pending = (
        Job.objects.pending().values_list("job_id", "next_run_at").order_by().iterator(
            chunk_size=REBUILD_BATCH
        )
    )
    written = 0
    batch: list[tuple[str, int]] = []
    for job_id, next_run_at in pending:
        batch.append((str(job_id), datetime_to_ms(next_run_at)))
        if len(batch) >= REBUILD_BATCH:
            written += store.add(batch)
            if on_batch is not None:
                on_batch(len(batch))
            batch = []
    if batch:
        written += store.add(batch)
        if on_batch is not None:
            on_batch(len(batch))
    return written


def serving_primaries(nodes: Mapping[str, Mapping[str, object]]) -> frozenset[str]:
    """The ids of the primaries that serve slots, from redis-py's ``cluster_nodes()`` reply
    (``{address: {"node_id", "flags", "slots", …}}``). A primary that failed keeps its slots
    in this view until its replica is elected, so the set changes once per failover, when the
    new primary serves them."""
    return frozenset(
        str(node["node_id"]) for node in nodes.values()
        if "master" in str(node["flags"]).split(",") and node["slots"]
    )


def redis_incarnation(client: RedisClient) -> str | frozenset[str]:
    """What changes when the data behind ``client`` may have gone back in time: a single
    server's run id (new at every start), or a cluster's :func:`serving_primaries`."""
    if is_cluster(client):
        return serving_primaries(client.cluster_nodes())
    return str(client.info("server")["run_id"])


class Reconciler(threading.Thread):
    """A beat replica's background repair of its own shards: one shard every
    ``interval_ms``, round robin, and every newly gained shard at once (a shard taken over,
    or all of them after Redis lost its data), and every owned shard at once after a Redis
    restart or failover (:func:`redis_incarnation`)."""

    def __init__(self, store: TimerStore, *, interval_ms: int) -> None:
        super().__init__(name="chrono-reconciler", daemon=True)
        self.store = store
        self.interval_s = interval_ms / 1000
        self.owned: frozenset[int] = frozenset()
        self.totals = ReconcileReport()
        self._urgent: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._cursor = 0
        self._incarnation: str | frozenset[str] | None = None
        self._next_incarnation_check = 0.0
        self._next_overdue_sweep = 0.0
        self._full_pass: FullPass | None = None

    def gained(self, shards: list[int]) -> None:
        for shard in shards:
            self._urgent.put(shard)

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            shard = None
            try:
                self._watch_incarnation()
                self._sweep_overdue()
                shard = self._next_shard()
                if shard is not None:
                    self._note(shard, reconcile_shard(self.store, shard))
                self._end_full_pass()
            except (redis.RedisError, DatabaseError) as exc:
                log.error("reconciling shard %s failed, will retry: %r", shard, exc)
                if self._full_pass is not None and shard in self._full_pass.left:
                    self._urgent.put(shard)  # not done: the pass after a failover needs it
                close_old_connections()
                self._stopping.wait(1.0)
                continue
            if self._urgent.empty():
                self._stopping.wait(self.interval_s)
        connection.close()

    def _watch_incarnation(self) -> None:
        now = time.monotonic()
        if now < self._next_incarnation_check:
            return
        self._next_incarnation_check = now + INCARNATION_CHECK_INTERVAL_S
        current = redis_incarnation(self.store.client)
        previous, self._incarnation = self._incarnation, current
        if previous is None or current == previous:
            return
        owned = sorted(self.owned)
        log.warning("Redis restarted or failed over (%s): reconciling all %d owned shards "
                    "with PostgreSQL now", _describe_change(previous, current), len(owned))
        self._full_pass = FullPass(set(owned), started=now)
        self.gained(owned)

    def _sweep_overdue(self) -> None:
        now = time.monotonic()
        if now < self._next_overdue_sweep or not self.owned:
            return
        self._next_overdue_sweep = now + OVERDUE_SWEEP_INTERVAL_S
        self.totals += reconcile_overdue(self.store, self.owned, now_ms=now_ms())

    def _note(self, shard: int, report: ReconcileReport) -> None:
        self.totals += report
        if self._full_pass is not None:
            self._full_pass.note(shard, report)

    def _end_full_pass(self) -> None:
        if self._full_pass is None:
            return
        summary = self._full_pass.summary(self.owned, time.monotonic())
        if summary is not None:
            log.warning("%s", summary)
            self._full_pass = None

    def _next_shard(self) -> int | None:
        try:
            shard = self._urgent.get_nowait()
        except queue.Empty:
            owned = sorted(self.owned)
            if not owned:
                return None
            self._cursor = (self._cursor + 1) % len(owned)
            return owned[self._cursor]
        if shard not in self.owned:
            return None  # another replica's now, which reconciles it (FullPass)
        return shard


def _describe_change(previous: str | frozenset[str], current: str | frozenset[str]) -> str:
    if isinstance(previous, str) or isinstance(current, str):
        return f"run id {previous} -> {current}"
    return (f"primaries {', '.join(sorted(previous - current))} replaced by "
            f"{', '.join(sorted(current - previous))}")


def timed_rebuild(store: TimerStore, *, on_batch: Callable[[int], None] | None = None
                  ) -> tuple[int, float]:
    started = time.monotonic()
    return rebuild_all(store, on_batch=on_batch), time.monotonic() - started
