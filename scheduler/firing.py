"""The two threads behind a beat replica's loop: the firer publishes, the recorder records.

The beat's loop (:mod:`scheduler.beat`) claims timers ``prepare_ahead_ms`` before they are due,
writes their executions and builds their messages, then hands each prepared occurrence to the
**firer**. The firer sleeps until the earliest fire time, publishes everything due by then as one
batch and, without waiting for its confirms, goes on to the next fire time; it reads confirms
between publishes and passes each batch RabbitMQ confirmed to the **recorder**, which marks the
executions dispatched, moves the jobs on and acknowledges the timers in Redis. Nothing waits for
anything slower than itself: a PostgreSQL statement in the loop or in the recorder does not hold
up a publish that is due, nor does the confirm of the batch before it; the recorder writes, at
most every ``RECORD_INTERVAL_S``, every batch confirmed since its last statement with one
statement.

A publish that RabbitMQ fails is tried again with back-off while the replica surely holds the
shards; a replica that dies meanwhile loses nothing (the timers stay inflight and the shard's next
owner publishes them after their ack deadline; the worker-side start runs one delivery).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import redis
from django.db import DatabaseError, close_old_connections

from scheduler import occurrences, rollups
from scheduler.bursts import turns
from scheduler.dispatch import Confirmation, DispatchError, EncodedMessage, Publisher
from scheduler.lifecycle import execution_id_for, execution_id_text
from scheduler.models import JobStatus
from scheduler.occurrences import JobAdvance
from scheduler.ownership import ShardOwnership
from scheduler.timers import ClaimedTimer, TimerStore

if TYPE_CHECKING:
    from scheduler.beat import BeatCounters

MAX_BACKOFF_S = 5.0
# Batches the recorder writes with one statement at most (a backlog after an outage is written
# in slices of this many, so that no statement grows without bound).
RECORD_MERGE_LIMIT = 64
# The recorder writes at most this often: the firer publishes small batches (what came due
# during the last confirm), and one statement for several of them costs PostgreSQL and the
# beat far less than one each. Recording later only keeps the timers inflight a little longer.
RECORD_INTERVAL_S = 0.02
# While confirms are awaited the firer reads them for at most this long before it looks at the
# heap again (an occurrence put in for an earlier time than the next is noticed that late).
POLL_MS = 2
# Occurrences prepared early are looked at again this many times ``prepare_ahead_ms`` before
# their fire time: the look at a burst of 10,000 takes 50-250 ms on this machine, and must be
# over by then. A job changed later than that may still fire, as any job changed within
# ``prepare_ahead_ms`` of its time does.
EARLY_CHECK_FACTOR = 3
# Messages published and not yet confirmed, at most: past it the firer waits for confirms (a
# connection lost with them unconfirmed publishes them again).
MAX_IN_FLIGHT = 2_000
# A burst shared by tenants goes out head first: its first HEAD_ITEMS occurrences (in turns by
# tenant, so every tenant with a few jobs in it has them there), then, once RabbitMQ confirmed
# them or after HEAD_WAIT_MS, the rest. Published in one batch with the big tenant's thousands,
# the few jobs of a small tenant were at the front of the queue and still reached a worker
# late, behind the broker's intake of the whole batch (bench/RESULTS.md, "Fair bursts").
HEAD_ITEMS = 100
HEAD_WAIT_MS = 30

log = logging.getLogger("chrono.beat")


# Named tuples rather than dataclasses: the beat makes one of each per job, and a NamedTuple is
# read at a tuple's cost and built for ~0.2 µs (a frozen dataclass with slots: ~0.3 µs).
class Fired(NamedTuple):
    """A claimed timer whose job fires: the occurrences to publish for it (one, several after a
    misfire, none when an overlap policy held them back) and the job's next fire time (None:
    none, a one-time job)."""

    timer: ClaimedTimer
    job: occurrences.DueJob
    fire_ms: list[int]
    next_ms: int | None


class Ack(NamedTuple):
    """A claimed timer to acknowledge, and the next fire time to add for it (None: none)."""

    timer: ClaimedTimer
    next_ms: int | None


@dataclass
class ConfirmedBatch:
    """A claimed batch after its publish was confirmed: what is left to record and ack."""

    leases: dict[int, str]
    acks: list[Ack] = field(default_factory=list)
    fired: list[Fired] = field(default_factory=list)
    confirmed_at_ms: int = 0

    def shards(self) -> set[int]:
        return {a.timer.shard for a in self.acks} | {f.timer.shard for f in self.fired}


@dataclass
class Prepared:
    """A prepared occurrence (or several, after a misfire) waiting for its fire time; ``early``
    when it was prepared sooner than ``prepare_ahead_ms`` before it (a burst), so that its job
    is looked at again then (:meth:`Firer._check_early`)."""

    leases: dict[int, str]
    fired: Fired
    messages: list[EncodedMessage]
    early: bool = False


class _Group:
    """Occurrences due at one time under one view of the leases, kept by tenant as they are put
    (so that at the fire time their order in turns by tenant, :func:`scheduler.bursts.turns`,
    is one pass), with the count of their shards."""

    __slots__ = ("leases", "by_tenant", "shards")

    def __init__(self, leases: dict[int, str]) -> None:
        self.leases = leases
        self.by_tenant: dict[str, list[Prepared]] = {}
        self.shards: Counter[int] = Counter()

    def add(self, prepared: Prepared) -> None:
        own = self.by_tenant.get(prepared.fired.job.tenant_id)
        if own is None:
            own = self.by_tenant[prepared.fired.job.tenant_id] = []
        own.append(prepared)
        self.shards[prepared.fired.timer.shard] += 1

    def merge(self, other: _Group) -> None:
        for tenant, theirs in other.by_tenant.items():
            self.by_tenant.setdefault(tenant, []).extend(theirs)
        self.shards.update(other.shards)

    def __iter__(self) -> Iterator[Prepared]:
        for own in self.by_tenant.values():
            yield from own


class _Head(list):
    """The head of a burst shared by tenants: the firer awaits its confirm (at most
    ``HEAD_WAIT_MS``) before it sends the rest."""


def head_first(in_turns: list[Prepared], *, tenants: int) -> list[list[Prepared]]:
    """A group in turns by tenant as the batches to send: its head and the rest when it is
    shared by tenants and longer than ``HEAD_ITEMS``, else the group whole."""
    if tenants < 2 or len(in_turns) <= HEAD_ITEMS:
        return [in_turns]
    return [_Head(in_turns[:HEAD_ITEMS]), in_turns[HEAD_ITEMS:]]


class DueBuckets:
    """Prepared occurrences by fire time: a heap of the distinct times and, for each, its
    occurrences grouped by the leases they were claimed under and by tenant, as they are put.
    The work per occurrence is done when it is put, ahead of its time: at the fire time a burst
    is taken as a few groups. Kept as a heap of one entry per occurrence, a burst of 10,000 took
    50-70 ms to pop, group and order at the very moment it was due (bench/RESULTS.md, "Session
    11 figures / Bursts")."""

    def __init__(self) -> None:
        self._times: list[int] = []
        self._by_time: dict[int, dict[int, _Group]] = {}

    def put(self, due_ms: int, prepared: Prepared) -> bool:
        """Add ``prepared``; whether its time is a new earliest one (the firer must wake)."""
        groups = self._by_time.get(due_ms)
        new = groups is None
        if groups is None:
            groups = self._by_time[due_ms] = {}
            heapq.heappush(self._times, due_ms)
        group = groups.get(id(prepared.leases))
        if group is None:
            group = groups[id(prepared.leases)] = _Group(prepared.leases)
        group.add(prepared)
        return new and self._times[0] == due_ms

    def earliest_ms(self) -> int | None:
        return self._times[0] if self._times else None

    def take_due(self, now_ms: int) -> list[_Group]:
        """Everything due by ``now_ms``, one group per view of the leases (a burst prepared
        slice by slice, each slice with its copy of the leases, is one group)."""
        by_view: dict[frozenset, _Group] = {}
        while self._times and self._times[0] <= now_ms:
            for group in self._by_time.pop(heapq.heappop(self._times)).values():
                view = frozenset(group.leases.items())
                if view in by_view:
                    by_view[view].merge(group)
                else:
                    by_view[view] = group
        return list(by_view.values())

    def __len__(self) -> int:
        return sum(group.shards.total() for groups in self._by_time.values()
                   for group in groups.values())

    def __iter__(self) -> Iterator[Prepared]:
        for groups in self._by_time.values():
            for group in groups.values():
                yield from group


def drop_unsure_leases(
    batch: ConfirmedBatch, ownership: ShardOwnership, counters: BeatCounters, replica_id: str
) -> None:
    """Publish nothing of a shard whose lease may have expired while this batch was being
    prepared (a pause longer than the lease): it stays inflight for the next owner."""
    unsure = {s for s in batch.shards() if not ownership.surely_held(s)}
    if unsure:
        log.warning("replica %s: lease of shards %s may have expired; publishing nothing of "
                    "them", replica_id, sorted(unsure))
        counters.fenced += len(unsure)
        batch.fired = [f for f in batch.fired if f.timer.shard not in unsure]
        batch.acks = [a for a in batch.acks if a.timer.shard not in unsure]


class Firer(threading.Thread):
    """Publishes prepared occurrences at their fire times (never before), one confirmed batch
    for everything due at once, and hands each batch to the recorder."""

    def __init__(
        self,
        *,
        publisher: Publisher,
        publish_lock: threading.Lock,
        ownership: ShardOwnership,
        counters: BeatCounters,
        recorder: Recorder,
        replica_id: str,
        clock: Callable[[], int],
        check_ahead_ms: int = 0,
    ) -> None:
        super().__init__(name="chrono-firer", daemon=True)
        self.publisher = publisher
        self.publish_lock = publish_lock
        self.ownership = ownership
        self.counters = counters
        self.recorder = recorder
        self.replica_id = replica_id
        self.clock = clock
        self._due = DueBuckets()
        # Occurrences prepared early, until their check ``EARLY_CHECK_FACTOR * check_ahead_ms``
        # before their fire time: (check ms, sequence, fire ms, occurrence).
        self.check_ahead_ms = check_ahead_ms
        self._unchecked: list[tuple[int, int, int, Prepared]] = []
        self._sequence = itertools.count()
        self._changed = threading.Condition()
        self._finishing = False
        # Batches sent whose confirms are awaited, oldest first.
        self._in_flight: list[tuple[Confirmation, ConfirmedBatch, list[Prepared]]] = []
        # Occurrences taken off the heaps and not yet handed to the recorder (being looked at
        # again, published, or awaiting their confirm), by shard: with the heaps, what
        # :meth:`busy_shards` reports.
        self._taken: Counter[int] = Counter()

    def _untake(self, prepared: Iterable[Prepared]) -> None:
        with self._changed:
            self._taken.subtract(p.fired.timer.shard for p in prepared)
            self._taken += Counter()  # drops the shards down to zero

    def busy_shards(self) -> set[int]:
        """The shards of every occurrence this firer still has to publish or hand to the
        recorder: a shard being handed over is released only when it is in neither's."""
        with self._changed:
            busy = set(self._taken)
            busy.update(p.fired.timer.shard for p in self._due)
            busy.update(p.fired.timer.shard for _, _, _, p in self._unchecked)
        return busy

    def put(self, due_ms: int, prepared: Prepared) -> None:
        with self._changed:
            if prepared.early:
                check_ms = due_ms - EARLY_CHECK_FACTOR * self.check_ahead_ms
                heapq.heappush(self._unchecked, (check_ms, next(self._sequence), due_ms,
                                                 prepared))
                if self._unchecked[0][3] is prepared:
                    self._changed.notify()
                return
            if self._due.put(due_ms, prepared):
                self._changed.notify()

    def waiting(self) -> int:
        with self._changed:
            return len(self._due) + len(self._unchecked)

    def _check_early(self) -> None:
        """Look again at the jobs of the occurrences prepared early whose check time came (one
        query for all): those still due go to the heap to be published at their time; those
        whose job was paused, deleted or moved meanwhile are withdrawn, as the preparation
        would have left them had it run now."""
        with self._changed:
            now = self.clock()
            due: list[tuple[int, Prepared]] = []
            while self._unchecked and self._unchecked[0][0] <= now:
                _, _, due_ms, prepared = heapq.heappop(self._unchecked)
                due.append((due_ms, prepared))
            self._taken.update(p.fired.timer.shard for _, p in due)
        if not due:
            return
        try:
            self._look_again(due)
        finally:
            self._untake(p for _, p in due)

    def _look_again(self, due: list[tuple[int, Prepared]]) -> None:
        try:
            changed = occurrences.changed_jobs(
                [(p.fired.job.job_id, p.fired.timer.fire_at_ms) for _, p in due])
        except DatabaseError as exc:
            # Publish them as prepared (what a preparation at the usual time would have done
            # a moment earlier): a burst is not held back by a failed look.
            log.warning("could not look again at %d occurrences prepared early; publishing "
                        "them as prepared: %r", len(due), exc)
            close_old_connections()
            changed = {}
        withdrawn: list[tuple[Prepared, int | None]] = []
        with self._changed:
            for due_ms, prepared in due:
                state = changed.get(prepared.fired.job.job_id)
                if state is None:
                    prepared.early = False
                    self._due.put(due_ms, prepared)
                else:
                    status, next_ms = state
                    withdrawn.append((prepared, next_ms if status == JobStatus.ACTIVE else None))
            self._changed.notify()
        if withdrawn:
            self._withdraw(withdrawn)

    def _withdraw(self, withdrawn: list[tuple[Prepared, int | None]]) -> None:
        """Publish none of ``withdrawn``: delete their executions (still ``SCHEDULED``: nothing
        happened to them) and acknowledge their timers, with the job's own next fire time when
        it moved."""
        try:
            occurrences.forget_scheduled([
                (str(execution_id_for(p.fired.job.job_id, ms)), ms) for p, _ in withdrawn
                for ms in p.fired.fire_ms])
        except DatabaseError as exc:
            # Not acknowledged: the timers stay inflight and are claimed again after their
            # deadline, when the preparation finds the job as it is now and acts on it.
            log.error("could not withdraw %d occurrences whose job changed after they were "
                      "prepared; they are looked at again after their ack deadline: %r",
                      len(withdrawn), exc)
            close_old_connections()
            return
        self.counters.withdrawn += len(withdrawn)
        by_leases: dict[int, ConfirmedBatch] = {}
        for prepared, next_ms in withdrawn:
            batch = by_leases.setdefault(id(prepared.leases),
                                         ConfirmedBatch(leases=prepared.leases))
            batch.acks.append(Ack(prepared.fired.timer, next_ms))
        for batch in by_leases.values():
            self.recorder.submit(batch)

    def finish(self, timeout_s: float = 10.0) -> None:
        """Publish what is waiting, each at its time, then stop (a clean stop of the replica
        hands nothing prepared over to the next owner's ack deadline)."""
        with self._changed:
            self._finishing = True
            self._changed.notify()
        self.join(timeout_s)

    def run(self) -> None:
        backoff_s = 0.1
        while (groups := self._take_due()) is not None:
            self._check_early()
            sent = 0
            try:
                for group in groups:
                    self._send(group)
                    sent += 1
                    if isinstance(group, _Head):
                        self._await(group, HEAD_WAIT_MS / 1000)
                if self._collect(self._poll_s()):
                    backoff_s = 0.1
            except DispatchError as exc:
                # The connection is gone, and with it every confirm still awaited: what was
                # not confirmed waits again (a message that did reach the queue and goes out
                # again is a duplicate with the same execution id: one delivery runs).
                self.counters.failed_iterations += 1
                again = groups[sent:] + [group for _, _, group in self._in_flight]
                self._in_flight.clear()
                # How many go out again: the most duplicates this failure can make.
                log.error("publishing failed, retrying in %.1f s (%d messages without a "
                          "confirm go out again): %r", backoff_s,
                          sum(len(p.messages) for g in again for p in g), exc)
                self._put_again(again, backoff_s)
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)

    def _take_due(self) -> list[list[Prepared]] | None:
        """Everything due now, grouped by the leases it was claimed under; [] when nothing is
        due but confirms are awaited (they are read next); otherwise wait for the earliest
        fire time. None once finishing with nothing left."""
        with self._changed:
            while True:
                now = self.clock()
                earliest = self._due.earliest_ms()
                if (earliest is not None and earliest <= now
                        and self._in_flight_messages() < MAX_IN_FLIGHT):
                    # One batch per view of the leases, in turns by tenant (head first
                    # when shared by tenants).
                    groups = self._due.take_due(now)
                    for group in groups:
                        self._taken.update(group.shards)
                    return [batch for group in groups
                            for batch in head_first(turns(list(group.by_tenant.values())),
                                                    tenants=len(group.by_tenant))]
                if self._in_flight or (self._unchecked and self._unchecked[0][0] <= now):
                    return []
                if self._finishing and earliest is None and not self._unchecked:
                    return None
                wake = [ms for ms in (earliest, self._unchecked[0][0] if self._unchecked
                                      else None) if ms is not None]
                self._changed.wait((min(wake) - now) / 1000 if wake else None)

    def _poll_s(self) -> float:
        """How long to wait for confirms: until the next fire time, at most ``POLL_MS`` (an
        occurrence put in meanwhile for an earlier time is noticed that late at most)."""
        with self._changed:
            head_ms = self._due.earliest_ms()
        wait_ms = POLL_MS if head_ms is None else min(POLL_MS, max(0, head_ms - self.clock()))
        return wait_ms / 1000

    def _in_flight_messages(self) -> int:
        return sum(confirmation.size for confirmation, _, _ in self._in_flight)

    def _put_again(self, groups: list[list[Prepared]], after_s: float) -> None:
        retry_at = self.clock() + int(after_s * 1000)
        for group in groups:
            for prepared in group:
                self.put(retry_at, prepared)
            self._untake(group)

    def _send(self, group: list[Prepared]) -> None:
        """Publish occurrences prepared under the same leases, without waiting for their
        confirms; what the lease check drops stays inflight for the shard's next owner."""
        # The time each message goes out, in it (a worker can tell which lease it was published
        # under, and when). Read before the lease check: a message stamped after a pause (a
        # SIGSTOP longer than the lease) is checked after it too, and dropped.
        published_ms = self.clock()
        batch = ConfirmedBatch(leases=group[0].leases, fired=[p.fired for p in group])
        drop_unsure_leases(batch, self.ownership, self.counters, self.replica_id)
        kept = {id(f) for f in batch.fired}
        messages = [m for p in group if id(p.fired) in kept for m in p.messages]
        if not messages:
            self._done(batch, group)
            return
        with self.counters.timed("publish"), self.publish_lock:
            confirmation = self.publisher.send_encoded(messages, published_ms)
        self._in_flight.append((confirmation, batch, group))

    def _await(self, group: list[Prepared], timeout_s: float) -> None:
        """Read confirms until ``group``'s (sent last) is in, or for ``timeout_s`` at most."""
        deadline = time.monotonic() + timeout_s
        while any(sent is group for _, _, sent in self._in_flight):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._collect(min(left, POLL_MS / 1000))

    def _collect(self, timeout_s: float) -> bool:
        """Read confirms for up to ``timeout_s``; hand each batch that RabbitMQ confirmed to
        the recorder (one with a nacked message waits and goes again). Whether any was."""
        if not self._in_flight:
            return False
        with self.publish_lock:
            self.publisher.poll(timeout_s)
        confirmed = False
        for entry in [e for e in self._in_flight if e[0].settled]:
            self._in_flight.remove(entry)
            confirmation, batch, group = entry
            if confirmation.lost or confirmation.nacked:
                # Lost: the loop's own publish (a retry) found the connection gone.
                self.counters.failed_iterations += 1
                log.error("a batch of %d was %s, publishing it again", confirmation.size,
                          "lost" if confirmation.lost else "nacked")
                self._put_again([group], 0.1)
                continue
            confirmed = True
            batch.confirmed_at_ms = self.clock()
            self.counters.published += confirmation.size
            self.counters.redelivered += sum(1 for f in batch.fired if f.timer.redelivered)
            self.counters.note_lateness(batch.confirmed_at_ms - fire_ms
                                        for fired in batch.fired for fire_ms in fired.fire_ms)
            self._done(batch, group)
        return confirmed

    def _done(self, batch: ConfirmedBatch, group: list[Prepared]) -> None:
        self.recorder.submit(batch)
        self._untake(group)
        self.counters.batches += 1


class Recorder(threading.Thread):
    """Records confirmed batches in PostgreSQL and acknowledges them in Redis, off the firing
    path. Batches that queued up while a statement ran are written together.

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
        # Shards of the batches submitted and not yet recorded and acknowledged.
        self._pending: Counter[int] = Counter()
        self._pending_lock = threading.Lock()

    def submit(self, batch: ConfirmedBatch) -> None:
        with self._pending_lock:
            self._pending.update(batch.shards())
        self._batches.put(batch)

    def busy_shards(self) -> set[int]:
        """Shards of batches submitted and not yet recorded and acknowledged."""
        with self._pending_lock:
            return set(self._pending)

    def _recorded(self, batches: Sequence[ConfirmedBatch]) -> None:
        with self._pending_lock:
            for batch in batches:
                self._pending.subtract(batch.shards())
            self._pending += Counter()

    def close(self, timeout_s: float = 10.0) -> None:
        """Record what was submitted, then stop."""
        self._batches.put(None)
        self.join(timeout_s)

    def run(self) -> None:
        closing = False
        while not closing:
            batches = [self._batches.get()]
            time.sleep(RECORD_INTERVAL_S)
            while len(batches) < RECORD_MERGE_LIMIT:
                try:
                    batches.append(self._batches.get_nowait())
                except queue.Empty:
                    break
            if None in batches:
                closing = True
                batches = [b for b in batches if b is not None]
            backoff_s = 0.1
            while batches:
                try:
                    self.record(batches)
                    self._recorded(batches)
                    break
                except (redis.RedisError, DatabaseError) as exc:
                    log.error("recording %d batches failed, retrying in %.1f s: %r",
                              len(batches), backoff_s, exc)
                    close_old_connections()
                    time.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)

    def record(self, batches: Sequence[ConfirmedBatch]) -> None:
        """Record and acknowledge confirmed batches: one PostgreSQL statement for all of them,
        one Redis round trip per run of batches claimed under the same leases."""
        fired = [(batch.confirmed_at_ms, f) for batch in batches for f in batch.fired]
        advanced: set[str] = set()
        if fired:
            with self.counters.timed("record"):
                advanced = occurrences.record_dispatched(
                    [occurrences.Dispatched(execution_id_text(job.job_id, fire_ms), fire_ms,
                                            confirmed_ms)
                     for confirmed_ms, (_, job, fire_ms_list, _) in fired
                     for fire_ms in fire_ms_list],
                    advances=[JobAdvance(job.job_id, t.fire_at_ms, nxt, confirmed_ms)
                              for confirmed_ms, (t, job, _, nxt) in fired],
                )
            counted = rollups.recorder()
            for confirmed_ms, (_, job, fire_ms_list, _) in fired:
                for fire_ms in fire_ms_list:
                    counted.note_dispatched(confirmed_ms, job.tenant_id, job.job_type,
                                            confirmed_ms - fire_ms)
        for leases, acks in _ack_runs(batches, advanced):
            with self.counters.timed("ack"):
                fenced = self.store.ack(leases, acks)
            for shard in fenced:
                self.fenced.put(shard)
            rearmed = [(t.shard, t.timer_id, nxt) for t, nxt in acks
                       if nxt is not None and t.shard not in fenced]
            for item in rearmed:
                self.rearmed.put(item)
            if rearmed or fenced:
                self.wake()


def _ack_runs(
    batches: Sequence[ConfirmedBatch], advanced: set[str]
) -> list[tuple[dict[int, str], list[Ack]]]:
    """The acks of ``batches`` as runs that share one view of the leases (a batch whose lease
    on a shard differs from the run's starts a new run). A fired timer whose job was not
    advanced (edited or deleted meanwhile) is acknowledged without a next fire time."""
    runs: list[tuple[dict[int, str], list[Ack]]] = []
    for batch in batches:
        acks = list(batch.acks) + [Ack(t, nxt if job.job_id in advanced else None)
                                   for t, job, _, nxt in batch.fired]
        if not acks:
            continue
        shards = {t.shard for t, _ in acks}
        if runs and all(runs[-1][0].get(s, batch.leases.get(s)) == batch.leases.get(s)
                        for s in shards):
            leases, run_acks = runs[-1]
            leases.update({s: batch.leases[s] for s in shards if s in batch.leases})
            run_acks += acks
        else:
            runs.append(({s: batch.leases[s] for s in shards if s in batch.leases}, acks))
    return runs
