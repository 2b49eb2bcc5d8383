"""The beat replica: loads its shards' next seconds into a timing wheel and fires them on time.

One loop, no polling at tick rate:

* every ``scan_interval_ms`` it reads, for each owned shard, the timers entering the look-ahead
  window (only the new slice since the last scan), whether an earlier timer is already overdue, and
  whether a claimed timer outlived its ack deadline;
* timers added inside the window are announced on pub/sub and inserted in the wheel at once, so
  "run in 50 ms" fires on time;
* it sleeps until the wheel's next expiry; on expiry it claims the due timers of those shards (a
  fenced Lua claim), publishes them in one confirmed batch, records them in PostgreSQL, and
  acknowledges them (cron jobs get their next occurrence on ack).

A failed iteration (Redis, RabbitMQ or PostgreSQL unreachable) is logged with its cause and retried
with back-off; the claimed timers stay inflight and are published again after their deadline, so
nothing is lost.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
from django.db import DatabaseError, close_old_connections

from chronoadmin.config import ChronoConfig
from scheduler import occurrences
from scheduler.clock import now_ms
from scheduler.cron import parse_cron
from scheduler.dispatch import DispatchError, Publisher, TaskMessage
from scheduler.ownership import ShardOwnership
from scheduler.timers import (
    ANNOUNCE_CHANNEL,
    ClaimedTimer,
    TimerStore,
    execution_id_for,
    shard_keys,
)
from scheduler.wheel import TimingWheel

OWNERSHIP_REFRESH_MS = 1_000
MAX_BACKOFF_S = 5.0

log = logging.getLogger("chrono.beat")


@dataclass
class BeatCounters:
    """What one replica did since it started; logged periodically and read by tests."""

    published: int = 0
    redelivered: int = 0
    skipped_inactive: int = 0
    stale: int = 0
    fenced: int = 0
    failed_iterations: int = 0
    last_tick_ms: int = 0
    dispatch_lateness_ms: list[int] = field(default_factory=list)


class Beat:
    """One beat replica. ``run()`` blocks until ``stop()``."""

    def __init__(
        self,
        *,
        replica_id: str,
        config: ChronoConfig,
        store: TimerStore,
        publisher: Publisher,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.replica_id = replica_id
        self.config = config
        self.store = store
        self.publisher = publisher
        self.clock = clock
        self.ownership = ShardOwnership(
            store, replica_id=replica_id, lease_ttl_ms=config.shard_lease_ttl_ms
        )
        self.wheel = TimingWheel(start_ms=clock(), tick_ms=config.tick_ms)
        self.counters = BeatCounters()
        self._scanned_until: dict[int, int] = {}
        self._announced: queue.SimpleQueue[tuple[int, str, int]] = queue.SimpleQueue()
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._next_refresh_ms = 0
        self._next_scan_ms = 0
        self._pending_shards: set[int] = set()

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.set()

    def run(self) -> None:
        listener = threading.Thread(target=self._listen, name="chrono-announce", daemon=True)
        listener.start()
        backoff_s = 0.1
        log.info("beat replica %s started", self.replica_id)
        try:
            while not self._stopping.is_set():
                try:
                    self.run_once()
                    backoff_s = 0.1
                except (redis.RedisError, DatabaseError, DispatchError, OSError) as exc:
                    self.counters.failed_iterations += 1
                    log.error("beat iteration failed, retrying in %.1f s: %r", backoff_s, exc)
                    close_old_connections()
                    self._stopping.wait(backoff_s)
                    backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
                    self._next_scan_ms = 0
                    continue
                self._sleep()
        finally:
            self._leave()

    def _leave(self) -> None:
        try:
            self.ownership.leave()
            log.info("beat replica %s stopped and released its shards", self.replica_id)
        except redis.RedisError as exc:
            log.error("could not release shards at stop (they expire with their lease): %r", exc)
        self.publisher.close()

    def _sleep(self) -> None:
        now = self.clock()
        wake_at = min(self._next_scan_ms, self._next_refresh_ms)
        next_fire = self.wheel.next_fire_ms()
        if next_fire is not None:
            wake_at = min(wake_at, next_fire)
        if wake_at > now:
            self._wakeup.wait((wake_at - now) / 1000)
        self._wakeup.clear()

    # -- one iteration --------------------------------------------------------------------------

    def run_once(self) -> None:
        now = self.clock()
        self.counters.last_tick_ms = now
        if now >= self._next_refresh_ms:
            self._refresh_ownership(now)
        if now >= self._next_scan_ms:
            self._scan(now)
        self._take_announcements()
        for timer_id, _ in self.wheel.advance(now):
            self._pending_shards.add(self.store.shard_of(timer_id))
        if self._pending_shards:
            shards, self._pending_shards = self._pending_shards, set()
            self.fire(sorted(shards), now)

    def _refresh_ownership(self, now: int) -> None:
        change = self.ownership.refresh(now)
        for shard in change.lost:
            self._scanned_until.pop(shard, None)
        if change.gained:
            self._next_scan_ms = 0  # scan the new shards from the beginning right away
        self._next_refresh_ms = now + OWNERSHIP_REFRESH_MS

    def _scan(self, now: int) -> None:
        """Load the window's new slice of every owned shard; note overdue and expired shards."""
        shards = sorted(self.ownership.leases)
        until = now + self.config.lookahead_ms
        client = self.store.client
        pipe = client.pipeline(transaction=False)
        for shard in shards:
            due, inflight, _, _ = shard_keys(shard)
            low = self._scanned_until.get(shard)
            pipe.zrangebyscore(due, "-inf" if low is None else f"({low}", until, withscores=True)
            pipe.zrange(due, 0, 0, withscores=True)
            pipe.zrangebyscore(inflight, "-inf", now, start=0, num=1)
        replies = pipe.execute()
        for i, shard in enumerate(shards):
            window, earliest, expired = replies[3 * i : 3 * i + 3]
            for member, score in window:
                self.wheel.add(member.decode(), int(score))
            if (earliest and earliest[0][1] <= now) or expired:
                self._pending_shards.add(shard)
            self._scanned_until[shard] = until
        self._next_scan_ms = now + self.config.scan_interval_ms

    def _take_announcements(self) -> None:
        while True:
            try:
                shard, timer_id, fire_at_ms = self._announced.get_nowait()
            except queue.Empty:
                return
            if shard in self.ownership.leases:
                self.wheel.add(timer_id, fire_at_ms)

    def _listen(self) -> None:
        """Pub/sub listener thread: announcements of timers added inside the window."""
        backoff_s = 0.1
        while not self._stopping.is_set():
            try:
                pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(ANNOUNCE_CHANNEL)
                backoff_s = 0.1
                while not self._stopping.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None:
                        self._queue_announcement(message["data"])
            except redis.RedisError as exc:
                # Announcements sent while we were away are lost: rescan everything.
                log.error("announce listener lost Redis, retrying in %.1f s: %r", backoff_s, exc)
                self._scanned_until.clear()
                self._stopping.wait(backoff_s)
                backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)

    def _queue_announcement(self, data: bytes) -> None:
        for line in data.decode().splitlines():
            shard, timer_id, fire_at_ms = line.split(" ")
            self._announced.put((int(shard), timer_id, int(fire_at_ms)))
        self._wakeup.set()

    # -- firing ---------------------------------------------------------------------------------

    def fire(self, shards: Sequence[int], now: int) -> None:
        """Claim everything due in ``shards`` and dispatch it, batch by batch."""
        limit = self.config.claim_batch_size
        while shards:
            claimed, fenced = self.store.claim_due(
                self.ownership.leases,
                shards,
                now_ms=now,
                ack_deadline_ms=self.config.ack_deadline_ms,
                limit=limit,
            )
            self._fenced(fenced)
            if claimed:
                self.dispatch(claimed)
            per_shard: dict[int, int] = defaultdict(int)
            for timer in claimed:
                per_shard[timer.shard] += 1
            shards = [s for s, n in per_shard.items() if n >= limit]

    def _fenced(self, shards: list[int]) -> None:
        if shards:
            self.counters.fenced += len(shards)
            self.ownership.drop(shards)
            for shard in shards:
                self._scanned_until.pop(shard, None)

    def dispatch(self, claimed: Sequence[ClaimedTimer]) -> None:
        """Publish one claimed batch, record it, and acknowledge it."""
        claimed = sorted(claimed, key=lambda t: t.fire_at_ms)
        jobs = occurrences.load_jobs(t.timer_id for t in claimed)
        acks: list[tuple[ClaimedTimer, int | None]] = []
        fired: list[tuple[ClaimedTimer, occurrences.DueJob]] = []
        for timer in claimed:
            job = jobs.get(timer.timer_id)
            if job is None or not job.is_active:
                self.counters.skipped_inactive += 1
                acks.append((timer, None))
            elif job.next_run_ms != timer.fire_at_ms:
                # Already published and recorded (only the ack was lost), or moved by an edit:
                # keep the timer PostgreSQL holds.
                self.counters.stale += 1
                acks.append((timer, job.next_run_ms))
            else:
                fired.append((timer, job))
        if fired:
            acks += self._publish(fired)
        self._fenced(self.store.ack(self.ownership.leases, acks))

    def _publish(
        self, fired: list[tuple[ClaimedTimer, occurrences.DueJob]]
    ) -> list[tuple[ClaimedTimer, int | None]]:
        executions = [
            occurrences.NewExecution(
                execution_id=execution_id_for(job.job_id, timer.fire_at_ms),
                job_id=job.job_id,
                tenant_id=job.tenant_id,
                fire_at_ms=timer.fire_at_ms,
            )
            for timer, job in fired
        ]
        occurrences.insert_scheduled(executions)
        self.publisher.publish_batch(
            [
                _task_message(execution, timer, job)
                for execution, (timer, job) in zip(executions, fired, strict=True)
            ]
        )
        confirmed_at = self.clock()
        advances = [
            (job.job_id, timer.fire_at_ms, next_occurrence_ms(job, timer.fire_at_ms, confirmed_at))
            for timer, job in fired
        ]
        advanced = occurrences.record_dispatched(
            [e.execution_id for e in executions], confirmed_at_ms=confirmed_at, advances=advances
        )
        self.counters.published += len(fired)
        self.counters.redelivered += sum(1 for timer, _ in fired if timer.redelivered)
        self.counters.dispatch_lateness_ms.extend(
            confirmed_at - timer.fire_at_ms for timer, _ in fired
        )
        del self.counters.dispatch_lateness_ms[:-10_000]
        return [
            (timer, nxt if job_id in advanced else None)
            for (timer, _), (job_id, _, nxt) in zip(fired, advances, strict=True)
        ]


def next_occurrence_ms(job: occurrences.DueJob, fired_ms: int, now: int) -> int | None:
    """The occurrence after ``fired_ms``; None for a one-time job.

    Occurrences that fell due while nothing dispatched (all replicas down) are not replayed: the
    late one fires once and the schedule resumes after ``now`` (misfire policy ``fire_once``).
    """
    if not job.cron_expression:
        return None
    return parse_cron(job.cron_expression, job.timezone).next_fire_ms(max(fired_ms, now))


def _task_message(
    execution: occurrences.NewExecution, timer: ClaimedTimer, job: occurrences.DueJob
) -> TaskMessage:
    return TaskMessage(
        task_id=str(execution.execution_id),
        task_name=job.job_type,
        queue=job.queue,
        args=job.args,
        kwargs=job.kwargs,
        chrono_headers={
            "chrono_execution_id": str(execution.execution_id),
            "chrono_job_id": job.job_id,
            "chrono_tenant_id": job.tenant_id,
            "chrono_attempt": 1,
            "chrono_fire_ms": timer.fire_at_ms,
        },
    )
