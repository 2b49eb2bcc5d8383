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

import heapq
import itertools
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
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

from chronoadmin.config import ChronoConfig
from scheduler import occurrences
from scheduler.attempts import (
    RETRY_TIMER_SEPARATOR,
    load_waiting,
    mark_dispatched,
    policy_header,
)
from scheduler.clock import now_ms
from scheduler.dispatch import DispatchError, Publisher, TaskMessage
from scheduler.misfire import FirePlan, jittered_ms, plan_occurrences
from scheduler.models import OverlapPolicy
from scheduler.ownership import ShardOwnership
from scheduler.reconcile import Reconciler
from scheduler.timers import (
    ANNOUNCE_CHANNEL,
    ClaimedTimer,
    TimerStore,
    execution_id_for,
    shard_keys,
)
from scheduler.wheel import TimingWheel

OWNERSHIP_REFRESH_MS = 1_000
STATS_LOG_INTERVAL_MS = 10_000
OVERLAP_RECHECK_MS = 1_000
SCAN_SLICES = 4
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

    def summary(self) -> str:
        lateness = sorted(self.dispatch_lateness_ms)
        p50 = lateness[len(lateness) // 2] if lateness else None
        p99 = lateness[int(len(lateness) * 0.99)] if lateness else None
        phases = " ".join(f"{k}={v:.0f}ms" for k, v in sorted(self.phase_ms.items()))
        return (
            f"published={self.published} batches={self.batches} redelivered={self.redelivered} "
            f"stale={self.stale} inactive={self.skipped_inactive} fenced={self.fenced} "
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
        self._wakeup = threading.Event()
        self.recorder = Recorder(store, self.counters, wake=self._wakeup.set)
        self.reconciler = Reconciler(store, interval_ms=config.reconcile_shard_interval_ms)
        self._scanned_until: dict[int, int] = {}
        self._announced: queue.SimpleQueue[tuple[int, str, int]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._next_refresh_ms = 0
        self._next_scan_ms = 0
        self._pending_shards: set[int] = set()
        # Prepared occurrences by fire time: (fire ms, sequence, _Ready).
        self._ready: list[tuple[int, int, _Ready]] = []
        self._sequence = itertools.count()
        self._next_stats_ms = 0
        self._scan_slice = 0

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.set()

    def run(self) -> None:
        listener = threading.Thread(target=self._listen, name="chrono-announce", daemon=True)
        listener.start()
        self.recorder.start()
        self.reconciler.start()
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
        self.reconciler.stop()
        self._publish_prepared()
        self.recorder.close()
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
            wake_at = min(wake_at, next_fire - self.config.prepare_ahead_ms)
        if self._ready:
            wake_at = min(wake_at, self._ready[0][0])
        if wake_at > now:
            self._wakeup.wait((wake_at - now) / 1000)
        self._wakeup.clear()

    # -- one iteration --------------------------------------------------------------------------

    def run_once(self) -> None:
        now = self.clock()
        self.counters.last_tick_ms = now
        if now >= self._next_stats_ms:
            if self._next_stats_ms:
                log.info("replica %s: %s", self.replica_id, self.counters.summary())
            self._next_stats_ms = now + STATS_LOG_INTERVAL_MS
        if now >= self._next_refresh_ms:
            self._refresh_ownership(now)
        if now >= self._next_scan_ms:
            with self.counters.timed("scan"):
                self._scan(now)
        self._take_announcements()
        self._fenced(_drain(self.recorder.fenced))
        self.publish_ready()
        # Timers due within prepare_ahead_ms are claimed and prepared now, so that only the
        # publish is left for their fire time.
        horizon = now + self.config.prepare_ahead_ms
        for timer_id, _ in self.wheel.advance(horizon):
            self._pending_shards.add(self.store.shard_of(timer_id))
        if self._pending_shards:
            shards, self._pending_shards = self._pending_shards, set()
            self.fire(sorted(shards), horizon)
        self.publish_ready()

    def _refresh_ownership(self, now: int) -> None:
        change = self.ownership.refresh(now)
        for shard in change.lost:
            self._scanned_until.pop(shard, None)
        self.reconciler.owned = frozenset(self.ownership.leases)
        if change.gained:
            self._next_scan_ms = 0  # scan the new shards from the beginning right away
            self.reconciler.gained(change.gained)
        self._next_refresh_ms = now + OWNERSHIP_REFRESH_MS

    def _scan(self, now: int) -> None:
        """Load the window's new slice of a quarter of the owned shards (and of any shard not
        scanned yet); note overdue and expired shards. Each shard is scanned every
        ``scan_interval_ms``; spreading the shards over the interval keeps every pause of the
        loop short, so timers due during a scan are not held up by all of it."""
        self._scan_slice = (self._scan_slice + 1) % SCAN_SLICES
        shards = [s for s in sorted(self.ownership.leases)
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
        for shard, timer_id, fire_at_ms in _drain(self._announced) + _drain(self.recorder.rearmed):
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
            with self.counters.timed("claim"):
                claimed, fenced = self.store.claim_due(
                    self.ownership.leases,
                    shards,
                    now_ms=now,
                    ack_deadline_ms=self.config.ack_deadline_ms,
                    limit=limit,
                )
            self._fenced(fenced)
            if claimed:
                dispatch_isolating(self.dispatch, claimed, self._refused)
            per_shard: dict[int, int] = defaultdict(int)
            for timer in claimed:
                per_shard[timer.shard] += 1
            shards = [s for s, n in per_shard.items() if n >= limit]

    def _refused(self, timer: ClaimedTimer, exc: DatabaseError) -> None:
        self.counters.refused += 1
        log.error("replica %s: PostgreSQL refused timer %s due at %d; it stays inflight and is "
                  "tried again after its ack deadline: %r", self.replica_id, timer.timer_id,
                  timer.fire_at_ms, exc)

    def _fenced(self, shards: list[int]) -> None:
        if shards:
            self.counters.fenced += len(shards)
            self.ownership.drop(shards)
            self.reconciler.owned = frozenset(self.ownership.leases)
            for shard in shards:
                self._scanned_until.pop(shard, None)

    def dispatch(self, claimed: Sequence[ClaimedTimer]) -> None:
        """Prepare one claimed batch (execution rows, misfire and overlap decisions, messages)
        and queue its occurrences for publishing at their fire times (:meth:`publish_ready`);
        timers claimed up to ``prepare_ahead_ms`` early wait in memory, inflight in Redis."""
        retries = [t for t in claimed if RETRY_TIMER_SEPARATOR in t.timer_id]
        if retries:
            self._wait_until(max(t.fire_at_ms for t in retries), ignore_stop=True)
            self._dispatch_retries(retries)
            claimed = [t for t in claimed if RETRY_TIMER_SEPARATOR not in t.timer_id]
        claimed = sorted(claimed, key=lambda t: t.fire_at_ms)
        with self.counters.timed("load_insert"):
            jobs = occurrences.load_and_insert([(t.timer_id, t.fire_at_ms) for t in claimed])
        batch = ConfirmedBatch(leases=dict(self.ownership.leases))
        now = self.clock()
        skipped: list[tuple[occurrences.DueJob, int, str | None]] = []
        for timer in claimed:
            job = jobs.get(timer.timer_id)
            if job is None or not job.is_active:
                self.counters.skipped_inactive += 1
                batch.acks.append((timer, None))
            elif job.next_run_ms != timer.fire_at_ms:
                # Already published and recorded (only the ack was lost), or moved by an edit:
                # keep the timer PostgreSQL holds.
                self.counters.stale += 1
                batch.acks.append((timer, job.next_run_ms))
            else:
                plan = self._plan(job, timer.fire_at_ms, now)
                skipped += [(job, ms, reason) for ms, reason in plan.skipped]
                self.counters.misfired += len(plan.skipped)
                batch.fired.append((timer, job, plan.fire_ms, plan.next_ms))
        skipped += self._apply_overlap_policies(batch, now)
        # Rows to write besides the ones the claim inserted: the skipped occurrences, and the
        # occurrences a misfire plan fires other than the claimed one (decided after the overlap
        # policies, which may have taken an occurrence out of a plan: one row per occurrence).
        misfires = skipped + [(job, ms, None) for timer, job, fire_ms_list, _ in batch.fired
                              for ms in fire_ms_list if ms != timer.fire_at_ms]
        if misfires:
            with self.counters.timed("misfire"):
                occurrences.record_misfires(misfires)
        for fired in batch.fired:
            timer, job, fire_ms_list, _ = fired
            messages = [_task_message(job, ms, batch.leases[timer.shard]) for ms in fire_ms_list]
            due_ms = max(fire_ms_list, default=0)  # nothing to publish: record at once
            heapq.heappush(self._ready, (due_ms, next(self._sequence),
                                         _Ready(batch.leases, fired, messages)))
        if batch.acks:
            acks = ConfirmedBatch(leases=batch.leases, acks=batch.acks)
            self._drop_unsure_leases(acks)
            self.recorder.submit(acks)
        self.publish_ready()

    def publish_ready(self) -> None:
        """Publish, in one confirmed batch, every prepared occurrence whose fire time has come;
        its recording and acks go to the recorder thread."""
        now = self.clock()
        due: dict[int, list[_Ready]] = {}
        while self._ready and self._ready[0][0] <= now:
            ready = heapq.heappop(self._ready)[2]
            due.setdefault(id(ready.leases), []).append(ready)
        for group in due.values():
            self._publish(group)

    def _publish(self, group: list[_Ready]) -> None:
        """Publish occurrences prepared under the same leases; what the lease check drops stays
        inflight for the shard's next owner."""
        batch = ConfirmedBatch(leases=group[0].leases, fired=[r.fired for r in group])
        self._drop_unsure_leases(batch)
        kept = {id(f) for f in batch.fired}
        messages = [m for r in group if id(r.fired) in kept for m in r.messages]
        if messages:
            with self.counters.timed("publish"):
                self.publisher.publish_batch(messages)
            batch.confirmed_at_ms = self.clock()
            self.counters.published += len(messages)
            self.counters.redelivered += sum(1 for t, *_ in batch.fired if t.redelivered)
            self.counters.dispatch_lateness_ms.extend(
                batch.confirmed_at_ms - fire_ms
                for _, _, fire_ms_list, _ in batch.fired
                for fire_ms in fire_ms_list
            )
            del self.counters.dispatch_lateness_ms[:-10_000]
        self.recorder.submit(batch)
        self.counters.batches += 1

    def _publish_prepared(self) -> None:
        """At a clean stop: publish what was prepared (due within ``prepare_ahead_ms``) at its
        time rather than leave it inflight until the next owner's ack deadline."""
        try:
            while self._ready:
                self._wait_until(self._ready[0][0], ignore_stop=True)
                self.publish_ready()
        except (redis.RedisError, DatabaseError, DispatchError, OSError) as exc:
            log.error("could not publish prepared occurrences at stop (they are redelivered "
                      "after their ack deadline): %r", exc)

    def _wait_until(self, at_ms: int, *, ignore_stop: bool = False) -> None:
        """Sleep until ``at_ms`` (never publish an occurrence before its time)."""
        while (delay_ms := at_ms - self.clock()) > 0:
            if ignore_stop:
                time.sleep(delay_ms / 1000)
            elif self._stopping.wait(delay_ms / 1000):
                return

    def _dispatch_retries(self, timers: Sequence[ClaimedTimer]) -> None:
        """Timers ``<execution id>#<attempt>``: attempts whose backoff was too long for a
        RabbitMQ retry tier. Publish the ones still waiting; acknowledge all."""
        wanted = [(t.timer_id.split(RETRY_TIMER_SEPARATOR)[0],
                   int(t.timer_id.split(RETRY_TIMER_SEPARATOR)[1])) for t in timers]
        rows = load_waiting(wanted)
        batch = ConfirmedBatch(leases=dict(self.ownership.leases),
                               acks=[(t, None) for t in timers])
        self._drop_unsure_leases(batch)
        sure = {t.timer_id.split(RETRY_TIMER_SEPARATOR)[0] for t, _ in batch.acks}
        rows = [row for row in rows if row.execution_id in sure]
        if rows:
            with self.counters.timed("publish"):
                self.publisher.publish_batch([row.message(row.attempt) for row in rows])
            mark_dispatched(rows, at_ms=self.clock())
            self.counters.published += len(rows)
        self.recorder.submit(batch)

    def _apply_overlap_policies(
        self, batch: ConfirmedBatch, now: int
    ) -> list[tuple[occurrences.DueJob, int, str | None]]:
        """Hold, skip or make room for occurrences of cron jobs whose previous occurrence is
        still running or waiting, per each job's overlap policy. Returns the skipped ones."""
        guarded = [f for f in batch.fired if f[1].cron_expression and f[2]
                   and f[1].overlap_policy != OverlapPolicy.ALLOW]
        if not guarded:
            return []
        active = occurrences.active_executions(
            [job.job_id for _, job, _, _ in guarded],
            exclude=[execution_id_for(job.job_id, ms) for _, job, fire, _ in guarded
                     for ms in fire],
        )
        skipped: list[tuple[occurrences.DueJob, int, str | None]] = []
        held: list[str] = []
        to_cancel: list[str] = []
        for index, (timer, job, fire, next_ms) in enumerate(batch.fired):
            previous = active.get(job.job_id)
            if not previous or job.overlap_policy == OverlapPolicy.ALLOW:
                continue
            running = any(status == "RUNNING" for _, status in previous)
            waiting = any(status != "RUNNING" for _, status in previous)
            policy = job.overlap_policy
            if policy == OverlapPolicy.CANCEL_PREVIOUS:
                to_cancel.append(job.job_id)
                continue
            if policy == OverlapPolicy.BUFFER_ONE and running and not waiting:
                # Wait for the running one: look again in a second, or at the next occurrence
                # if that comes first (it then is the one waiting).
                held += [str(execution_id_for(job.job_id, ms)) for ms in fire]
                recheck = now + OVERLAP_RECHECK_MS
                batch.fired[index] = (timer, job, [], min(recheck, next_ms or recheck))
                continue
            reason = ("the previous occurrence is still running (overlap policy skip)"
                      if policy == OverlapPolicy.SKIP
                      else "an occurrence is already waiting (overlap policy buffer_one)")
            skipped += [(job, ms, reason) for ms in fire]
            batch.fired[index] = (timer, job, [], next_ms)
        occurrences.forget_scheduled(held)
        if to_cancel:
            occurrences.cancel_previous(to_cancel, exclude=[
                execution_id_for(job.job_id, ms) for _, job, fire, _ in batch.fired
                for ms in fire])
        self.counters.overlap_skipped += len(skipped)
        return skipped

    def _drop_unsure_leases(self, batch: ConfirmedBatch) -> None:
        """Publish nothing of a shard whose lease may have expired while this batch was being
        prepared (a pause longer than the lease): it stays inflight for the next owner."""
        unsure = {t.shard for t, *_ in batch.fired if not self.ownership.surely_held(t.shard)}
        unsure |= {t.shard for t, _ in batch.acks if not self.ownership.surely_held(t.shard)}
        if unsure:
            log.warning("replica %s: lease of shards %s may have expired; publishing nothing of "
                        "them", self.replica_id, sorted(unsure))
            self.counters.fenced += len(unsure)
            batch.fired = [f for f in batch.fired if f[0].shard not in unsure]
            batch.acks = [a for a in batch.acks if a[0].shard not in unsure]

    def _plan(self, job: occurrences.DueJob, fire_at_ms: int, now: int) -> FirePlan:
        plan = plan_occurrences(
            schedule=job.schedule,
            fire_at_ms=fire_at_ms,
            now_ms=now,
            rule=job.misfire,
            grace_ms=self.config.misfire_grace_ms,
        )
        if plan.next_ms is not None:
            plan.next_ms = jittered_ms(job.job_id, plan.next_ms, job.jitter_ms)
        return plan


@dataclass
class ConfirmedBatch:
    """A claimed batch after its publish was confirmed: what is left to record and ack.

    ``fired`` holds, per claimed timer whose job fired: the job, the occurrences published for
    it (one, or several after a misfire) and its next fire time (None: none, one-time job)."""

    leases: dict[int, str]
    acks: list[tuple[ClaimedTimer, int | None]] = field(default_factory=list)
    fired: list[tuple[ClaimedTimer, occurrences.DueJob, list[int], int | None]] = field(
        default_factory=list
    )
    confirmed_at_ms: int = 0


@dataclass
class _Ready:
    """A prepared occurrence (or several, after a misfire) waiting for its fire time."""

    leases: dict[int, str]
    fired: tuple[ClaimedTimer, occurrences.DueJob, list[int], int | None]
    messages: list[TaskMessage]


# Errors PostgreSQL raises for what a statement holds, not for being unreachable: retrying the
# same batch cannot help, and a smaller one can.
REFUSALS = (DataError, IntegrityError, ProgrammingError)


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


class Recorder(threading.Thread):
    """Records confirmed batches in PostgreSQL and acknowledges them in Redis, off the firing
    path: the beat publishes the next batch while this one is written.

    A batch that cannot be recorded (PostgreSQL or Redis down) is retried with back-off; its
    timers stay inflight meanwhile, so a replica that dies here loses nothing (they are published
    again after their deadline and the worker-side start lets only one delivery run).
    """

    def __init__(
        self, store: TimerStore, counters: BeatCounters, *, wake: Callable[[], None]
    ) -> None:
        super().__init__(name="chrono-recorder", daemon=True)
        self.store = store
        self.counters = counters
        self.wake = wake
        self.fenced: queue.SimpleQueue[int] = queue.SimpleQueue()
        # Next fire times the acks just wrote, for the beat's wheel: a cron job's next
        # occurrence usually falls inside the window the beat already scanned.
        self.rearmed: queue.SimpleQueue[tuple[int, str, int]] = queue.SimpleQueue()
        self._batches: queue.Queue[ConfirmedBatch | None] = queue.Queue()

    def submit(self, batch: ConfirmedBatch) -> None:
        self._batches.put(batch)

    def close(self, timeout_s: float = 10.0) -> None:
        """Record what was submitted, then stop."""
        self._batches.put(None)
        self.join(timeout_s)

    def run(self) -> None:
        while (batch := self._batches.get()) is not None:
            backoff_s = 0.1
            while True:
                try:
                    self.record(batch)
                    break
                except (redis.RedisError, DatabaseError) as exc:
                    log.error("recording a batch failed, retrying in %.1f s: %r", backoff_s, exc)
                    close_old_connections()
                    time.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)

    def record(self, batch: ConfirmedBatch) -> None:
        acks = list(batch.acks)
        if batch.fired:
            advances = [(job.job_id, t.fire_at_ms, nxt) for t, job, _, nxt in batch.fired]
            with self.counters.timed("record"):
                advanced = occurrences.record_dispatched(
                    [
                        execution_id_for(job.job_id, fire_ms)
                        for _, job, fire_ms_list, _ in batch.fired
                        for fire_ms in fire_ms_list
                    ],
                    confirmed_at_ms=batch.confirmed_at_ms,
                    advances=advances,
                )
            acks += [
                (timer, nxt if job.job_id in advanced else None)
                for timer, job, _, nxt in batch.fired
            ]
        with self.counters.timed("ack"):
            fenced = self.store.ack(batch.leases, acks)
        for shard in fenced:
            self.fenced.put(shard)
        rearmed = [(t.shard, t.timer_id, nxt) for t, nxt in acks
                   if nxt is not None and t.shard not in fenced]
        for item in rearmed:
            self.rearmed.put(item)
        if rearmed or fenced:
            self.wake()


def _task_message(job: occurrences.DueJob, fire_at_ms: int, shard_lease: str) -> TaskMessage:
    execution_id = execution_id_for(job.job_id, fire_at_ms)
    return TaskMessage(
        task_id=str(execution_id),
        task_name=job.job_type,
        queue=job.queue,
        args_json=job.args_json,
        kwargs_json=job.kwargs_json,
        soft_timeout_ms=job.soft_timeout_ms,
        hard_timeout_ms=job.hard_timeout_ms,
        chrono_headers={
            "chrono_execution_id": str(execution_id),
            "chrono_job_id": job.job_id,
            "chrono_tenant_id": job.tenant_id,
            "chrono_attempt": 1,
            "chrono_fire_ms": fire_at_ms,
            # "<replica>|<fencing token>" of the lease it was claimed under: lets anyone check
            # which replica dispatched a message, and that it held the shard at the time.
            "chrono_shard_lease": shard_lease,
            "chrono_published_ms": now_ms(),
            "chrono_retry_policy": policy_header(job.retry),
            "chrono_idempotency_key": job.idempotency_key,
        },
    )


def _drain(items: queue.SimpleQueue) -> list:
    drained = []
    while True:
        try:
            drained.append(items.get_nowait())
        except queue.Empty:
            return drained
