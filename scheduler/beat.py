"""The beat replica: loads its shards' next seconds into a timing wheel and fires them on time.

One loop, no polling at tick rate:

* every ``scan_interval_ms`` it reads, for each owned shard, the timers entering the look-ahead
  window (only the new slice since the last scan), whether an earlier timer is already overdue, and
  whether a claimed timer outlived its ack deadline;
* timers added inside the window are announced on pub/sub and inserted in the wheel at once, so
  "run in 50 ms" fires on time;
* it sleeps until ``prepare_ahead_ms`` before the wheel's next expiry; then it claims the due
  timers of those shards (a fenced Lua claim), writes their executions and builds their messages,
  and hands them to the firer thread (:mod:`scheduler.firing`), which publishes them at their fire
  time in one confirmed batch; the recorder thread records them in PostgreSQL and acknowledges
  them (cron jobs get their next occurrence on ack).

A failed iteration (Redis, RabbitMQ or PostgreSQL unreachable) is logged with its cause and retried
with back-off; the claimed timers stay inflight and are published again after their deadline, so
nothing is lost.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    ProgrammingError,
    close_old_connections,
)

from chronocore.config import ChronoConfig
from chronocore.database import connection_lost
from chronocore.probe import Progress
from chronocore.redis_client import is_cluster
from scheduler import calendar_store, metrics, occurrences
from scheduler.announcements import Subscription
from scheduler.attempts import load_waiting, mark_dispatched, policy_header
from scheduler.bursts import PrepareRate, in_turns, prepare_horizon
from scheduler.calendars import ExclusionCalendar
from scheduler.clock import now_ms
from scheduler.cron import CronSchedule, parse_cron
from scheduler.dispatch import Publisher, TaskMessage
from scheduler.errors import BeatThreadDied, DispatchError
from scheduler.firing import (
    MAX_BACKOFF_S,
    Ack,
    ConfirmedBatch,
    Fired,
    Firer,
    Prepared,
    Recorder,
    drop_unsure_leases,
)
from scheduler.lifecycle import (
    RETRY_TIMER_SEPARATOR,
    execution_id_for,
    execution_id_text,
    parse_retry_timer,
)
from scheduler.misfire import FirePlan, calendar_exclusion, jittered_ms, plan_occurrences
from scheduler.occurrences import DueJob, PlannedOccurrence
from scheduler.overlap import OverlapAction, is_guarded
from scheduler.overlap import decide as decide_overlap
from scheduler.ownership import ACQUIRE_RETRY_MS, ShardOwnership, drain
from scheduler.reconcile import Reconciler
from scheduler.schedules import Schedule, hash_key_of
from scheduler.timers import ClaimedTimer, TimerStore, shard_keys
from scheduler.wheel import TimingWheel

STATS_LOG_INTERVAL_MS = 10_000
SCAN_SLICES = 4

log = logging.getLogger("chrono.beat")


@dataclass
class BeatCounters:
    """What one replica did since it started; logged periodically and read by tests."""

    published: int = 0
    redelivered: int = 0
    skipped_inactive: int = 0
    prepared_early: int = 0  # occurrences of bursts, prepared sooner than prepare_ahead_ms
    withdrawn: int = 0  # of those, the ones whose job changed before their fire time
    stale: int = 0
    fenced: int = 0
    misfired: int = 0
    overlap_skipped: int = 0
    failed_iterations: int = 0
    refused: int = 0
    last_tick_ms: int = 0
    dispatch_lateness_ms: list[int] = field(default_factory=list)
    phase_ms: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    batches: int = 0

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phase_ms[phase] += (time.perf_counter() - started) * 1000

    def note_lateness(self, lateness_ms: Iterable[int]) -> None:
        values = list(lateness_ms)
        self.dispatch_lateness_ms.extend(values)
        del self.dispatch_lateness_ms[:-10_000]
        metrics.observe_dispatch_lateness(values)

    def summary(self) -> str:
        lateness = sorted(self.dispatch_lateness_ms)
        p50 = lateness[len(lateness) // 2] if lateness else None
        p99 = lateness[int(len(lateness) * 0.99)] if lateness else None
        phases = " ".join(f"{k}={v:.0f}ms" for k, v in sorted(self.phase_ms.items()))
        return (
            f"published={self.published} batches={self.batches} redelivered={self.redelivered} "
            f"stale={self.stale} inactive={self.skipped_inactive} fenced={self.fenced} "
            f"early={self.prepared_early} withdrawn={self.withdrawn} "
            f"misfired={self.misfired} failed_iterations={self.failed_iterations} "
            f"refused={self.refused} lateness_p50={p50} p99={p99} {phases}"
        )


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
        # Marked after every iteration of the loop that went through: the probe's /health.
        self.progress = Progress("loop", stale_after_ms=metrics.beat_stale_after_ms(config))
        self._wakeup = threading.Event()
        self.recorder = Recorder(self._store_of_its_own(), self.counters,
                                 wake=self._wakeup.set)
        # The publisher is the firer's; retries sent from timers take it under this lock.
        self._publish_lock = threading.Lock()
        self.firer = Firer(publisher=publisher, publish_lock=self._publish_lock,
                           ownership=self.ownership, counters=self.counters,
                           recorder=self.recorder, replica_id=replica_id, clock=clock,
                           check_ahead_ms=config.prepare_ahead_ms)
        self.reconciler = Reconciler(self._store_of_its_own(),
                                     interval_ms=config.reconcile_shard_interval_ms)
        self._scanned_until: dict[int, int] = {}
        self._announced: queue.SimpleQueue[tuple[int, str, int]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._next_refresh_ms = 0
        self._next_scan_ms = 0
        self._pending_shards: set[int] = set()
        self._prepared_at_ms = 0
        self.prepare_rate = PrepareRate()
        self._burst_start_ms: int | None = None
        self._next_stats_ms = 0
        self._scan_slice = 0
        # Shards taken over, until when their inflight timers are claimed again at once (what
        # the previous owner claimed and never acknowledged: the ack deadline after the
        # take-over, so never a claim of this replica's own).
        self._reclaim_before: dict[int, int] = {}
        self._left = threading.Event()
        self.keeper = threading.Thread(target=self._keep_leases, name="chrono-lease-keeper",
                                       daemon=True)

    def _store_of_its_own(self) -> TimerStore:
        """The store for one of the beat's threads: on a Redis Cluster on a client of its own
        (as the keeper's renewals and the announcement listener are). A thread that meets a
        node down makes redis-py read the slot map again, which disconnects the connections
        every other thread of that client is using: their commands failed with an
        ``AttributeError`` (tests/cluster, the keeper's renewals with a primary killed), which
        no thread of the beat takes for an outage. On one server the pool is shared."""
        if not is_cluster(self.store.client):
            return self.store
        return TimerStore.from_url(self.config.redis_url, shard_count=self.store.shard_count,
                                   cluster=True)

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.set()

    def run(self) -> None:
        listener = threading.Thread(target=self._listen, name="chrono-announce", daemon=True)
        listener.start()
        self.keeper.start()
        self.recorder.start()
        self.firer.start()
        self.reconciler.start()
        backoff_s = 0.1
        log.info("beat replica %s started", self.replica_id)
        try:
            while not self._stopping.is_set():
                try:
                    self.run_once()
                    self.progress.mark()
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
        # Out of the membership first: the others map this replica's shards to themselves and
        # retry their acquire every ACQUIRE_RETRY_MS, while the keeper goes on renewing the
        # leases under which what was prepared is published and recorded.
        try:
            self.ownership.withdraw_membership()
        except redis.RedisError as exc:
            log.error("could not leave the membership at stop: %r", exc)
        self.reconciler.stop()
        self.firer.finish()
        self.recorder.close()
        try:
            self.ownership.leave()
            log.info("beat replica %s stopped and released its shards", self.replica_id)
        except redis.RedisError as exc:
            log.error("could not release shards at stop (they expire with their lease): %r", exc)
        finally:
            self._left.set()
        self.publisher.close()

    def _keep_leases(self) -> None:
        """The keeper thread: heartbeat and renew every ``ownership_refresh_interval_ms``,
        whatever the loop is busy with, until the replica has left."""
        interval_s = self.config.ownership_refresh_interval_ms / 1000
        while not self._left.is_set():
            try:
                if self.ownership.renew(self.clock()):
                    self._wakeup.set()
            except redis.RedisError as exc:
                log.error("replica %s could not renew its leases: %r", self.replica_id, exc)
            except Exception:  # noqa: BLE001 - a lapse must not end the replica (below)
                # Anything else (a fault of the Redis client's, a bug): logged with its
                # traceback and tried again. Ending the thread would end the replica; going on,
                # a fault that persists lets the leases lapse, and the fencing token does the
                # rest, as for an unreachable Redis.
                log.exception("replica %s could not renew its leases", self.replica_id)
            self._left.wait(interval_s)

    def _sleep(self) -> None:
        now = self.clock()
        wake_at = min(self._next_scan_ms, self._next_refresh_ms)
        next_fire = self.wheel.next_fire_ms()
        if next_fire is not None:
            wake_at = min(wake_at, prepare_at(next_fire, self._prepared_at_ms,
                                                 self.config.prepare_ahead_ms))
        if self._burst_start_ms is not None:
            wake_at = min(wake_at, self._burst_start_ms)
        if wake_at > now:
            self._wakeup.wait((wake_at - now) / 1000)
        self._wakeup.clear()

    # -- one iteration --------------------------------------------------------------------------

    def run_once(self) -> None:
        self._check_threads()
        now = self.clock()
        self.counters.last_tick_ms = now
        if now >= self._next_stats_ms:
            if self._next_stats_ms:
                log.info("replica %s: %s", self.replica_id, self.counters.summary())
            self._next_stats_ms = now + STATS_LOG_INTERVAL_MS
        if now >= self._next_refresh_ms:
            self._refresh_ownership(now)
        self._hand_over()
        if now >= self._next_scan_ms:
            with self.counters.timed("scan"):
                self._scan(now)
        self._take_announcements()
        self._fenced(drain(self.recorder.fenced))
        # Timers due within prepare_ahead_ms are claimed and prepared now, so that only the
        # publish is left for their fire time (the firer's); a burst further ahead that would
        # take longer to prepare than the time left before it, from now on (scheduler.bursts).
        horizon, self._burst_start_ms = self._horizon(now)
        for timer_id, _ in self.wheel.advance(horizon):
            self._pending_shards.add(self.store.shard_of(timer_id))
        if horizon > now + self.config.prepare_ahead_ms:
            # A burst: claim it in every owned shard, not only in those the scans brought into
            # the wheel so far (a scan reads a part of them at a time, and none runs while the
            # burst is prepared).
            self._pending_shards.update(self.ownership.claimable)
        if self._pending_shards:
            shards, self._pending_shards = self._pending_shards, set()
            self._prepared_at_ms = now
            self.fire(sorted(shards), horizon)

    def _horizon(self, now: int) -> tuple[int, int | None]:
        """What to prepare now (every timer due by the horizon) and when the next burst's
        preparation must start."""
        return prepare_horizon(
            now, self.wheel.due_counts(now + self.config.lookahead_ms),
            ahead_ms=self.config.prepare_ahead_ms, rate_per_ms=self.prepare_rate.per_ms,
            window_ms=self.config.lookahead_ms)

    def _check_threads(self) -> None:
        """A replica whose firer or recorder died (a bug) would go on claiming timers nobody
        publishes or acknowledges: stop it instead, loudly; leaving hands its shards to the
        other replicas at once (their timers are published after their ack deadline)."""
        for thread in (self.firer, self.recorder, self.keeper):
            if not thread.is_alive():
                raise BeatThreadDied(f"the beat's {thread.name} thread is not running; "
                                     "stopping this replica (see the traceback above)")

    def _refresh_ownership(self, now: int) -> None:
        change = self.ownership.refresh(now)
        for shard in change.lost:
            self._scanned_until.pop(shard, None)
            self._reclaim_before.pop(shard, None)
        self.reconciler.owned = frozenset(self.ownership.claimable)
        if change.gained:
            self._next_scan_ms = 0  # scan the new shards from the beginning right away
            self.reconciler.gained(change.gained)
            # Claimed at once: what the previous owner claimed and never acknowledged too (a
            # claim of this replica's own, from now on, gets a later deadline than this).
            until = now + self.config.ack_deadline_ms - 1
            self._reclaim_before.update(dict.fromkeys(change.gained, until))
            self._pending_shards.update(change.gained)
        for shard in [s for s, until in self._reclaim_before.items() if until < now]:
            del self._reclaim_before[shard]
        self._next_refresh_ms = now + (ACQUIRE_RETRY_MS if self.ownership.wanted
                                       else self.config.ownership_refresh_interval_ms)

    def _hand_over(self) -> None:
        """Release the leaving shards whose claimed timers are all published, recorded and
        acknowledged (or that waited ``HAND_OVER_WAIT_S``: what is left of them stays inflight
        and their next owner claims it again at once)."""
        if not self.ownership.leaving:
            return
        busy = self.firer.busy_shards() | self.recorder.busy_shards()
        deadline = time.monotonic() - HAND_OVER_WAIT_S
        drained = [s for s, since in self.ownership.leaving.items()
                   if s not in busy or since < deadline]
        if not drained:
            return
        overdue = sorted(s for s in drained if s in busy)
        if overdue:
            log.warning("replica %s: shards %s still had unrecorded timers after %.0f s of "
                        "hand-over; released anyway (their next owner claims them again)",
                        self.replica_id, overdue, HAND_OVER_WAIT_S)
        self.ownership.release(drained)
        for shard in drained:
            self._scanned_until.pop(shard, None)
            self._reclaim_before.pop(shard, None)
        log.info("replica %s handed over %d shards", self.replica_id, len(drained))

    def _scan(self, now: int) -> None:
        """Load the window's new slice of a quarter of the owned shards (and of any shard not
        scanned yet); note overdue and expired shards. Each shard is scanned every
        ``scan_interval_ms``; spreading the shards over the interval keeps every pause of the
        loop short, so timers due during a scan are not held up by all of it."""
        self._scan_slice = (self._scan_slice + 1) % SCAN_SLICES
        shards = [s for s in sorted(self.ownership.claimable)
                  if s % SCAN_SLICES == self._scan_slice or s not in self._scanned_until]
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
        self._next_scan_ms = now + self.config.scan_interval_ms // SCAN_SLICES

    def _take_announcements(self) -> None:
        for shard, timer_id, fire_at_ms in drain(self._announced) + drain(self.recorder.rearmed):
            if shard in self.ownership.claimable:
                self.wheel.add(timer_id, fire_at_ms)

    def _listen(self) -> None:
        """Pub/sub listener thread: announcements of timers added inside the window."""
        backoff_s = 0.1
        while not self._stopping.is_set():
            subscription = None
            try:
                subscription = Subscription(self.store.client, self.store.announce_channel)
                backoff_s = 0.1
                while not self._stopping.is_set():
                    data = subscription.get(timeout_s=0.5)
                    if data is not None:
                        self._queue_announcement(data)
            except redis.RedisError as exc:
                # Announcements sent while we were away are lost: rescan everything.
                log.error("announce listener lost Redis, retrying in %.1f s: %r", backoff_s, exc)
                self._scanned_until.clear()
                if subscription is not None:
                    subscription.close()
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
            with self.counters.timed("claim"):
                claimed, fenced, unreachable = self.store.claim_due(
                    self.ownership.claimable,
                    shards,
                    now_ms=now,
                    ack_deadline_ms=self.config.ack_deadline_ms,
                    limit=limit,
                    reclaim_before_ms=self._reclaim_before,
                )
            self._fenced(fenced)
            # Prepared and handed to the firer a slice at a time, earliest first: the firer
            # publishes the first slice while the next is prepared, rather than all of a burst
            # (a 10,000-way fan-out, the top of the minute) after the whole of it.
            parts = prepare_slices(claimed)
            for index, part in enumerate(parts):
                started = time.perf_counter()
                try:
                    dispatch_isolating(self.dispatch, part, self._refused)
                except DatabaseError as exc:
                    if connection_lost(exc):
                        self._hand_back([t for rest in parts[index:] for t in rest])
                    raise
                self.prepare_rate.measured(len(part), (time.perf_counter() - started) * 1000)
            per_shard: dict[int, int] = defaultdict(int)
            for timer in claimed:
                per_shard[timer.shard] += 1
            shards = [s for s, n in per_shard.items() if n >= limit]
            if unreachable:
                # A Redis Cluster node down: what the other nodes' shards claimed went out
                # above; these shards, and the rest of a burst, are claimed on the next
                # iteration, after the outage's back-off (run).
                self._pending_shards.update(unreachable, shards)
                raise next(iter(unreachable.values()))

    def _hand_back(self, timers: Sequence[ClaimedTimer]) -> None:
        """Put claimed timers that PostgreSQL could not be reached to prepare back in their
        shard's due set at their own fire time (none of them reached the firer or the
        recorder), so that they fire as soon as it answers again (a failover to a promoted
        standby takes seconds) rather than after their ack deadline."""
        try:
            self.store.ack(self.ownership.leases, [(t, t.fire_at_ms) for t in timers])
        except redis.RedisError as exc:
            log.error("could not hand %d claimed timers back (they are tried again after their "
                      "ack deadline): %r", len(timers), exc)
            return
        log.warning("replica %s: PostgreSQL unreachable; %d claimed timers handed back to be "
                    "claimed again", self.replica_id, len(timers))

    def _refused(self, timer: ClaimedTimer, exc: DatabaseError) -> None:
        self.counters.refused += 1
        log.error("replica %s: PostgreSQL refused timer %s due at %d; it stays inflight and is "
                  "tried again after its ack deadline: %r", self.replica_id, timer.timer_id,
                  timer.fire_at_ms, exc)

    def _fenced(self, shards: list[int]) -> None:
        if shards:
            self.counters.fenced += len(shards)
            self.ownership.drop(shards)
            self.reconciler.owned = frozenset(self.ownership.claimable)
            for shard in shards:
                self._scanned_until.pop(shard, None)

    def dispatch(self, claimed: Sequence[ClaimedTimer]) -> None:
        """Prepare one claimed batch (execution rows, misfire and overlap decisions, messages)
        and hand its occurrences to the firer, which publishes each at its fire time; timers
        claimed up to ``prepare_ahead_ms`` early wait in memory, inflight in Redis."""
        retries = [t for t in claimed if RETRY_TIMER_SEPARATOR in t.timer_id]
        if retries:
            self._wait_until(max(t.fire_at_ms for t in retries))
            self._dispatch_retries(retries)
            claimed = [t for t in claimed if RETRY_TIMER_SEPARATOR not in t.timer_id]
        claimed = sorted(claimed, key=lambda t: t.fire_at_ms)
        with self.counters.timed("load_insert"):
            jobs = occurrences.load_and_insert([(t.timer_id, t.fire_at_ms) for t in claimed])
        batch = ConfirmedBatch(leases=dict(self.ownership.leases))
        # The exclusion calendars of the jobs that name any, one statement for the batch (read
        # at each occurrence, so an edit of a calendar takes effect at the next one).
        calendars = calendar_store.calendars_of_jobs(
            (job.job_id, job.tenant_id, job.calendars) for job in jobs.values() if job.calendars)
        now = self.clock()
        skipped: list[PlannedOccurrence] = []
        for timer in claimed:
            job = jobs.get(timer.timer_id)
            if job is None or not job.is_active:
                self.counters.skipped_inactive += 1
                batch.acks.append(Ack(timer, None))
            elif job.next_run_ms != timer.fire_at_ms:
                # Already published and recorded (only the ack was lost), or moved by an edit:
                # keep the timer PostgreSQL holds.
                self.counters.stale += 1
                batch.acks.append(Ack(timer, job.next_run_ms))
            else:
                plan = self._plan(job, timer.fire_at_ms, now, calendars.get(job.job_id))
                skipped += [PlannedOccurrence(job, ms, reason) for ms, reason in plan.skipped]
                self.counters.misfired += len(plan.skipped)
                batch.fired.append(Fired(timer, job, plan.fire_ms, plan.next_ms))
        skipped += self._apply_overlap_policies(batch, now)
        # Rows to write besides the ones the claim inserted: the skipped occurrences, and the
        # occurrences a misfire plan fires other than the claimed one (decided after the overlap
        # policies, which may have taken an occurrence out of a plan: one row per occurrence).
        misfires = skipped + [PlannedOccurrence(f.job, ms, None) for f in batch.fired
                              for ms in f.fire_ms if ms != f.timer.fire_at_ms]
        if misfires:
            with self.counters.timed("misfire"):
                occurrences.record_misfires(misfires)
        for fired in batch.fired:
            lease = batch.leases[fired.timer.shard]
            # Encoded now, so that only the writes are left for the fire time.
            messages = self.publisher.encode(
                [_task_message(fired.job, ms, lease) for ms in fired.fire_ms])
            due_ms = max(fired.fire_ms, default=0)  # nothing to publish: record at once
            early = due_ms - now > self.config.prepare_ahead_ms
            self.counters.prepared_early += early
            self.firer.put(due_ms, Prepared(batch.leases, fired, messages, early=early))
        if batch.acks:
            acks = ConfirmedBatch(leases=batch.leases, acks=batch.acks)
            drop_unsure_leases(acks, self.ownership, self.counters, self.replica_id)
            self.recorder.submit(acks)

    def _wait_until(self, at_ms: int) -> None:
        """Sleep until ``at_ms`` (never publish an occurrence before its time)."""
        while (delay_ms := at_ms - self.clock()) > 0:
            time.sleep(delay_ms / 1000)

    def _dispatch_retries(self, timers: Sequence[ClaimedTimer]) -> None:
        """Timers ``<execution id>#<attempt>``: attempts whose backoff was too long for a
        RabbitMQ retry tier. Publish the ones still waiting; acknowledge all."""
        rows = load_waiting([parse_retry_timer(t.timer_id) for t in timers])
        batch = ConfirmedBatch(leases=dict(self.ownership.leases),
                               acks=[Ack(t, None) for t in timers])
        drop_unsure_leases(batch, self.ownership, self.counters, self.replica_id)
        sure = {parse_retry_timer(t.timer_id)[0] for t, _ in batch.acks}
        rows = in_turns([row for row in rows if row.execution_id in sure],
                        lambda row: row.tenant_id)
        if rows:
            with self.counters.timed("publish"), self._publish_lock:
                self.publisher.publish_batch([row.message(row.attempt) for row in rows])
            mark_dispatched(rows, at_ms=self.clock())
            self.counters.published += len(rows)
        self.recorder.submit(batch)

    def _apply_overlap_policies(
        self, batch: ConfirmedBatch, now: int
    ) -> list[PlannedOccurrence]:
        """Hold, skip or make room for occurrences of cron jobs whose previous occurrence is
        still running or waiting, per each job's overlap policy (:mod:`scheduler.overlap`
        decides). Returns the skipped ones."""
        guarded = [f for f in batch.fired if f.fire_ms and is_guarded(
            f.job.overlap_policy, recurring=f.job.is_recurring)]
        if not guarded:
            return []
        active = occurrences.active_executions(
            [f.job.job_id for f in guarded],
            exclude=[execution_id_for(f.job.job_id, ms) for f in guarded for ms in f.fire_ms],
        )
        skipped: list[PlannedOccurrence] = []
        held: list[tuple[str, int]] = []
        to_cancel: list[str] = []
        for index, fired in enumerate(batch.fired):
            previous = active.get(fired.job.job_id)
            if not previous:
                continue
            decision = decide_overlap(fired.job.overlap_policy,
                                      (status for _, status in previous),
                                      next_ms=fired.next_ms, now_ms=now)
            if decision.action == OverlapAction.FIRE:
                continue
            if decision.action == OverlapAction.FIRE_AND_CANCEL_PREVIOUS:
                to_cancel.append(fired.job.job_id)
                continue
            if decision.action == OverlapAction.HOLD:
                held += [(str(execution_id_for(fired.job.job_id, ms)), ms)
                         for ms in fired.fire_ms]
            else:
                skipped += [PlannedOccurrence(fired.job, ms, decision.reason)
                            for ms in fired.fire_ms]
            batch.fired[index] = fired._replace(fire_ms=[], next_ms=decision.next_ms)
        occurrences.forget_scheduled(held)
        if to_cancel:
            occurrences.cancel_previous(to_cancel, exclude=[
                execution_id_for(f.job.job_id, ms) for f in batch.fired for ms in f.fire_ms])
        self.counters.overlap_skipped += len(skipped)
        return skipped

    def _plan(self, job: DueJob, fire_at_ms: int, now: int,
              calendars: Sequence[ExclusionCalendar] | None = None) -> FirePlan:
        schedule = planned_schedule(job)
        plan = plan_occurrences(
            schedule=schedule,
            fire_at_ms=fire_at_ms,
            now_ms=now,
            rule=job.misfire,
            grace_ms=self.config.misfire_grace_ms,
            excluded_by=calendar_exclusion(job.job_id, schedule, fire_at_ms, job.jitter_ms,
                                           calendars),
        )
        if plan.next_ms is not None:
            plan.next_ms = jittered_ms(job.job_id, plan.next_ms, job.jitter_ms)
        return plan


class RememberedSchedule:
    """A cron schedule whose next fire times are remembered: the jobs of a burst mostly share
    a few expressions and one fire time (10,000 ``* * * * *`` jobs at the top of the minute),
    and planning each asks for the same next time twice (~40 µs each when computed)."""

    __slots__ = ("schedule", "_next")

    def __init__(self, schedule: CronSchedule) -> None:
        self.schedule = schedule
        self._next: dict[int, int] = {}

    def next_fire_ms(self, after_ms: int) -> int:
        found = self._next.get(after_ms)
        if found is None:
            if len(self._next) >= REMEMBERED_FIRE_TIMES:
                self._next.clear()
            found = self._next[after_ms] = self.schedule.next_fire_ms(after_ms)
        return found


# Next fire times each remembered schedule keeps (a beat plans a few fire times at a time).
REMEMBERED_FIRE_TIMES = 64


def planned_schedule(job: DueJob) -> RememberedSchedule | Schedule | None:
    """The schedule the beat plans ``job``'s occurrences with: a cron's remembered one (``H``
    hashed from the job's id, so a hashed expression is remembered per job), an interval's own
    (its arithmetic costs less than a look-up), None for a one-time job."""
    if not job.cron_expression:
        return job.schedule
    hashed = parse_cron(job.cron_expression, job.timezone).hashed
    return remembered_schedule(job.cron_expression, job.timezone,
                               hash_key_of(job.job_id) if hashed else "")


@functools.lru_cache(maxsize=4_096)
def remembered_schedule(expression: str, timezone: str, hash_key: str = "") -> RememberedSchedule:
    """The schedule of ``expression`` in ``timezone`` (``H`` hashed from ``hash_key``), with
    remembered next fire times (the beat's thread alone plans, so the memo needs no lock)."""
    return RememberedSchedule(parse_cron(expression, timezone, hash_key))


def prepare_at(next_fire_ms: int, prepared_at_ms: int, ahead_ms: int) -> int:
    """When to prepare the timer due at ``next_fire_ms``: ``ahead_ms`` before it, but not
    sooner than half of that after the last preparation (``prepared_at_ms``: each preparation
    takes a slice of half the horizon, not the one millisecond that just entered it), unless the
    timer is due within that half (one announced at short notice)."""
    if not ahead_ms:
        return next_fire_ms
    batched = max(next_fire_ms - ahead_ms, prepared_at_ms + ahead_ms // 2)
    return min(batched, next_fire_ms - ahead_ms // 2)


# A leaving shard is released at the latest this long after the map moved it away, drained or
# not (a recorder that cannot reach PostgreSQL must not keep a shard from its next owner).
HAND_OVER_WAIT_S = 3.0

# Claimed timers prepared (executions written, messages built) per statement at most.
# Measured with ``chrono bench workflow --fanout 10000`` (10,000 timers due at once): the whole
# claim prepared as one batch published its first message 3.4 s after the jobs were written.
PREPARE_SLICE = 500

# Errors PostgreSQL raises for what a statement holds, not for being unreachable: retrying the
# same batch cannot help, and a smaller one can.
REFUSALS = (DataError, IntegrityError, ProgrammingError)


def prepare_slices(claimed: Sequence[ClaimedTimer],
                   size: int = PREPARE_SLICE) -> list[list[ClaimedTimer]]:
    """A claim in the order to prepare it: earliest fire time first, ``size`` timers a slice."""
    ordered = sorted(claimed, key=lambda t: t.fire_at_ms)
    return [ordered[start:start + size] for start in range(0, len(ordered), size)]


def dispatch_isolating(
    dispatch: Callable[[Sequence[ClaimedTimer]], None],
    claimed: Sequence[ClaimedTimer],
    refused: Callable[[ClaimedTimer, DatabaseError], None],
) -> None:
    """Dispatch a claimed batch; when PostgreSQL refuses it (a :data:`REFUSALS` error),
    dispatch each half on its own, down to single timers, so that one bad timer holds back
    only itself and not the jobs that happened to share its batch. A timer refused on its own
    goes to ``refused`` and stays inflight: it is claimed again after its ack deadline."""
    try:
        dispatch(claimed)
    except REFUSALS as exc:
        if len(claimed) == 1:
            refused(claimed[0], exc)
            return
        middle = len(claimed) // 2
        dispatch_isolating(dispatch, claimed[:middle], refused)
        dispatch_isolating(dispatch, claimed[middle:], refused)


def _task_message(job: DueJob, fire_at_ms: int, shard_lease: str) -> TaskMessage:
    execution_id = execution_id_text(job.job_id, fire_at_ms)
    return TaskMessage(
        task_id=execution_id,
        task_name=job.job_type,
        queue=job.queue,
        args_json=job.args_json,
        kwargs_json=job.kwargs_json,
        soft_timeout_ms=job.soft_timeout_ms,
        hard_timeout_ms=job.hard_timeout_ms,
        chrono_headers={
            "chrono_execution_id": execution_id,
            "chrono_job_id": job.job_id,
            "chrono_tenant_id": job.tenant_id,
            "chrono_attempt": 1,
            "chrono_fire_ms": fire_at_ms,
            # "<replica>|<fencing token>" of the lease it was claimed under: lets anyone check
            # which replica dispatched a message, and that it held the shard at the time.
            "chrono_shard_lease": shard_lease,
            # chrono_published_ms: stamped by the firer when it publishes.
            "chrono_retry_policy": policy_header(job.retry),
            "chrono_idempotency_key": job.idempotency_key,
        },
    )

