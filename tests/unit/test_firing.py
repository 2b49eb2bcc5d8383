"""The beat's firer and recorder threads: when they publish, what they retry, what they merge.

The publisher and the recorder here are stand-ins that note what they were given (the firer's
timing logic is what is under test); the real path through RabbitMQ and PostgreSQL is covered by
``tests/e2e`` and ``tests/chaos``.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import redis
from django.db import OperationalError

from chronocore.config import load_config
from scheduler import firing, occurrences
from scheduler.beat import Beat, BeatCounters, BeatThreadDied, prepare_at
from scheduler.clock import now_ms
from scheduler.dispatch import Confirmation, DispatchError, Publisher
from scheduler.firing import ConfirmedBatch, Fired, Firer, Prepared, _ack_runs
from scheduler.lifecycle import execution_id_for
from scheduler.timers import ClaimedTimer, TimerStore


class NotingPublisher:
    """Notes each batch with the time it was sent; fails the first ``failures`` sends, nacks
    the first ``nacks`` batches, and confirms each ``confirm_ms`` after it was sent."""

    def __init__(self, failures: int = 0, *, nacks: int = 0, confirm_ms: int = 0) -> None:
        self.failures = failures
        self.nacks = nacks
        self.confirm_ms = confirm_ms
        self.batches: list[tuple[int, list[int]]] = []
        self.jobs: list[list[str]] = []  # each batch's jobs, in the order sent
        self.stamps: list[int] = []
        self.confirmed: list[tuple[int, Confirmation]] = []  # (when, which)
        self._pending: list[tuple[int, Confirmation]] = []
        self._tag = 0

    def send_encoded(self, encoded, published_ms: int) -> Confirmation:
        for item in encoded:
            item.message.chrono_headers["chrono_published_ms"] = published_ms
        return self.send([item.message for item in encoded])

    def send(self, messages) -> Confirmation:
        if self.failures:
            self.failures -= 1
            raise DispatchError("connection closed by the broker")
        at = now_ms()
        assert all(m.chrono_headers["chrono_published_ms"] <= at for m in messages)
        self.batches.append((at, [m.fire_ms for m in messages]))
        self.jobs.append([m.job for m in messages])
        self.stamps += [m.chrono_headers["chrono_published_ms"] for m in messages]
        first = self._tag + 1
        self._tag += len(messages)
        confirmation = Confirmation(len(messages), first, self._tag,
                                    waiting=set(range(first, self._tag + 1)))
        self._pending.append((at + self.confirm_ms, confirmation))
        return confirmation

    def poll(self, timeout_s: float) -> None:
        if self._pending and self._pending[0][0] > now_ms():
            time.sleep(min(timeout_s, (self._pending[0][0] - now_ms()) / 1000))
        while self._pending and self._pending[0][0] <= now_ms():
            _, confirmation = self._pending.pop(0)
            if self.nacks:
                self.nacks -= 1
                confirmation.nacked = True
            confirmation.waiting.clear()
            self.confirmed.append((now_ms(), confirmation))


class NotingRecorder:
    def __init__(self) -> None:
        self.batches: list[ConfirmedBatch] = []

    def submit(self, batch: ConfirmedBatch) -> None:
        self.batches.append(batch)


class Ownership:
    def __init__(self, unsure: set[int] = frozenset()) -> None:
        self.unsure = unsure

    def surely_held(self, shard: int) -> bool:
        return shard not in self.unsure


def firer(publisher, recorder, ownership=None) -> tuple[Firer, BeatCounters]:
    counters = BeatCounters()
    f = Firer(publisher=publisher, publish_lock=threading.Lock(),
              ownership=ownership or Ownership(), counters=counters, recorder=recorder,
              replica_id="r1", clock=now_ms)
    f.start()
    return f, counters


LEASES = {0: "r1|1", 1: "r1|1"}
# A burst's fire time in the tests that put it together item by item: far enough ahead that
# every item is in before the firer's fire time (150 ms was not, on a busy machine: the firer
# sent the first part alone in 3 of 7 runs of the unit suite, 2026-12-06).
BURST_AHEAD_MS = 1_000


def prepared(fire_ms: int, *, shard: int = 0, job: str = "job", tenant: str = "t",
             leases: dict[int, str] = LEASES) -> Prepared:
    timer = ClaimedTimer(timer_id=f"{job}-{fire_ms}", fire_at_ms=fire_ms, shard=shard,
                         redelivered=False)
    # A message that tells its fire time and job, to check when and in which order it went out.
    message = SimpleNamespace(fire_ms=fire_ms, job=job, chrono_headers={})
    encoded = SimpleNamespace(message=message)
    return Prepared(leases, Fired(timer, SimpleNamespace(job_id=job, tenant_id=tenant),
                                  [fire_ms], None), [encoded])


def test_each_occurrence_is_published_at_its_fire_time_never_before():
    publisher, recorder = NotingPublisher(), NotingRecorder()
    f, counters = firer(publisher, recorder)
    start = now_ms()
    for offset in (120, 40, 80, 80):
        f.put(start + offset, prepared(start + offset, job=f"j{offset}"))
    assert f.waiting() >= 1
    f.finish()

    published = [(at, fire) for at, messages in publisher.batches for fire in messages]
    assert sorted(fire for _, fire in published) == sorted(start + o for o in (120, 40, 80, 80))
    assert all(at >= fire for at, fire in published), "published before its fire time"
    # Each message carries the time it was published: not before its fire time.
    assert all(stamp >= fire for stamp, (_, fire) in zip(
        publisher.stamps, [(a, f) for a, ms in publisher.batches for f in ms], strict=True))
    assert all(at - fire < 1_000 for at, fire in published)
    assert not f.is_alive()
    assert counters.published == 4
    assert sum(len(b.fired) for b in recorder.batches) == 4
    assert all(b.confirmed_at_ms >= max(fire for f in b.fired for fire in f.fire_ms)
               for b in recorder.batches)


def test_a_publish_that_fails_is_tried_again_and_nothing_is_dropped():
    publisher, recorder = NotingPublisher(failures=2), NotingRecorder()
    f, counters = firer(publisher, recorder)
    due = now_ms() + 20
    f.put(due, prepared(due, job="a"))
    f.put(due, prepared(due, job="b"))
    deadline = time.monotonic() + 5
    while counters.published < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    f.finish()

    assert counters.failed_iterations == 2
    assert [fire for _, messages in publisher.batches for fire in messages] == [due, due]
    assert [f.job.job_id for b in recorder.batches for f in b.fired] == ["a", "b"]


def test_a_shard_whose_lease_may_have_expired_publishes_nothing_and_is_not_acked():
    publisher, recorder = NotingPublisher(), NotingRecorder()
    f, counters = firer(publisher, recorder, Ownership(unsure={1}))
    due = now_ms() + 10
    f.put(due, prepared(due, shard=0, job="kept"))
    f.put(due, prepared(due, shard=1, job="unsure"))
    f.finish()

    assert [m for _, messages in publisher.batches for m in messages] == [due]
    assert [f.job.job_id for b in recorder.batches for f in b.fired] == ["kept"]
    assert counters.fenced == 1


def test_the_next_batch_goes_out_while_the_confirm_of_the_one_before_is_on_its_way():
    """Confirms that take 60 ms do not hold up occurrences due 20 and 40 ms later."""
    publisher, recorder = NotingPublisher(confirm_ms=60), NotingRecorder()
    f, counters = firer(publisher, recorder)
    first = now_ms() + 30
    for offset in (0, 20, 40):
        f.put(first + offset, prepared(first + offset, job=f"j{offset}"))
    f.finish()

    sent = [at for at, _ in publisher.batches]
    assert len(sent) == 3
    first_confirmed = publisher.confirmed[0][0]
    assert sent[1] < first_confirmed and sent[2] < first_confirmed
    assert all(at - fire < 20 for at, fires in publisher.batches for fire in fires)
    assert [f.job.job_id for b in recorder.batches for f in b.fired] == ["j0", "j20", "j40"]
    assert all(b.confirmed_at_ms - b.fired[0].fire_ms[0] >= 60 for b in recorder.batches)
    assert counters.published == 3


def test_a_nacked_batch_is_published_again_and_recorded_once():
    publisher, recorder = NotingPublisher(nacks=1), NotingRecorder()
    f, counters = firer(publisher, recorder)
    due = now_ms() + 10
    f.put(due, prepared(due, job="a"))
    deadline = time.monotonic() + 5
    while counters.published < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    f.finish()

    assert [fires for _, fires in publisher.batches] == [[due], [due]]
    assert [f.job.job_id for b in recorder.batches for f in b.fired] == ["a"]
    assert counters.failed_iterations == 1 and counters.published == 1


def test_confirms_settle_by_delivery_tag_in_whatever_order_they_come():
    publisher = Publisher("amqp://guest:guest@127.0.0.1:1//")
    batches = []
    for size in (3, 2, 2):  # tags 1-3, 4-5, 6-7
        first = publisher._next_tag
        publisher._next_tag += size
        batches.append(Confirmation(size, first, first + size - 1,
                                    waiting=set(range(first, first + size))))
        publisher._unconfirmed.append(batches[-1])
    publisher._on_ack(5, False)  # the second batch's last message, before anything else
    publisher._on_ack(4, False)
    assert [b.settled for b in batches] == [False, True, False]
    publisher._on_nack(6, False)
    assert batches[2].nacked and batches[2].settled
    publisher._on_ack(3, True)  # "everything up to 3"
    assert batches[0].settled and not batches[0].nacked
    # The nacked batch failed as a whole: its other message is no longer awaited, and its
    # late ack changes nothing.
    assert not publisher._unconfirmed
    publisher._on_ack(7, False)
    assert batches[2].nacked
    with pytest.raises(DispatchError, match="nacked"):
        batches[2].raise_if_failed()
    batches[0].raise_if_failed()


def test_a_closed_connection_loses_the_confirms_still_awaited():
    publisher = Publisher("amqp://guest:guest@127.0.0.1:1//")
    waiting = Confirmation(2, 1, 2, waiting={1, 2})
    publisher._unconfirmed.append(waiting)
    publisher.close()
    assert waiting.lost and waiting.settled
    with pytest.raises(DispatchError, match="closed"):
        waiting.raise_if_failed()


def timer(job: str, shard: int) -> ClaimedTimer:
    return ClaimedTimer(timer_id=job, fire_at_ms=1_000, shard=shard, redelivered=False)


def fired_batch(leases: dict[int, str], *jobs: tuple[str, int]) -> ConfirmedBatch:
    return ConfirmedBatch(leases=leases, fired=[
        Fired(timer(job, shard), SimpleNamespace(job_id=job), [1_000], 2_000)
        for job, shard in jobs])


def test_batches_claimed_under_the_same_leases_are_acked_in_one_run():
    first = fired_batch({0: "r1|1", 1: "r1|1"}, ("a", 0))
    second = fired_batch({0: "r1|1", 1: "r1|1"}, ("b", 1))
    runs = _ack_runs([first, second], advanced={"a", "b"})
    assert len(runs) == 1
    leases, acks = runs[0]
    assert leases == {0: "r1|1", 1: "r1|1"}
    assert [(t.timer_id, nxt) for t, nxt in acks] == [("a", 2_000), ("b", 2_000)]


def test_a_batch_under_another_lease_token_starts_a_new_run():
    before = fired_batch({0: "r1|1"}, ("a", 0))
    after = fired_batch({0: "r1|2"}, ("b", 0))  # the shard was lost and taken again
    runs = _ack_runs([before, after], advanced={"a", "b"})
    assert [leases for leases, _ in runs] == [{0: "r1|1"}, {0: "r1|2"}]


def test_a_fired_job_that_was_not_advanced_is_acked_without_a_next_fire_time():
    batch = fired_batch({0: "r1|1"}, ("edited", 0), ("moved-on", 0))
    (_, acks), = _ack_runs([batch], advanced={"moved-on"})
    assert [(t.timer_id, nxt) for t, nxt in acks] == [("edited", None), ("moved-on", 2_000)]


def test_preparation_takes_slices_of_half_the_horizon():
    # Steady load: the next timer is 1 ms past the horizon just prepared; wait half of it.
    assert prepare_at(10_101, prepared_at_ms=10_000, ahead_ms=100) == 10_050
    # A quiet spell: prepare exactly the horizon before the next timer.
    assert prepare_at(20_000, prepared_at_ms=10_000, ahead_ms=100) == 19_900
    # Announced at short notice (due within half the horizon): at once.
    assert prepare_at(10_030, prepared_at_ms=10_000, ahead_ms=100) == 9_980
    # Without prepare-ahead: at the fire time.
    assert prepare_at(10_101, prepared_at_ms=10_000, ahead_ms=0) == 10_101


def test_a_replica_whose_firer_recorder_or_lease_keeper_died_stops_instead_of_claiming_on():
    config = load_config({})
    beat = Beat(replica_id="r1", config=config,
                store=TimerStore(redis.Redis(port=1), shard_count=config.shard_count),
                publisher=Publisher("amqp://guest:guest@127.0.0.1:1//"))
    beat.firer.start()
    beat.recorder.start()
    beat.keeper.start()  # renews nothing (no Redis there), logs it and goes on
    beat._check_threads()  # all running: nothing to say

    beat._left.set()  # the keeper ends (as a bug would end it)
    beat.keeper.join(5)
    with pytest.raises(BeatThreadDied, match="chrono-lease-keeper"):
        beat.run_once()
    beat.recorder.close()  # the recorder ends (as a bug would end it)
    with pytest.raises(BeatThreadDied, match="chrono-recorder"):
        beat.run_once()
    beat.firer.finish()
    with pytest.raises(BeatThreadDied, match="chrono-firer"):
        beat.run_once()


def _early_firer(publisher, recorder) -> tuple[Firer, BeatCounters]:
    counters = BeatCounters()
    f = Firer(publisher=publisher, publish_lock=threading.Lock(), ownership=Ownership(),
              counters=counters, recorder=recorder, replica_id="r1", clock=now_ms,
              check_ahead_ms=100)
    f.start()
    return f, counters


def test_occurrences_prepared_early_are_looked_at_again_and_withdrawn_if_their_job_changed(
        monkeypatch):
    """A burst prepared a second ahead: a job paused, deleted or moved meanwhile must not fire.
    Its occurrence is looked at again before its time (one query for all),
    its SCHEDULED row deleted and its timer acked (with the job's own next time if it moved)."""
    publisher, recorder = NotingPublisher(), NotingRecorder()
    f, counters = _early_firer(publisher, recorder)
    due = now_ms() + 400
    names = ("kept", "paused", "deleted", "moved")
    looked: list[tuple[int, list[str]]] = []
    forgotten: list[tuple[str, int]] = []

    def changed_jobs(planned):
        looked.append((now_ms(), sorted(job for job, _ in planned)))
        assert {fire for _, fire in planned} == {due}
        return {"paused": ("PAUSED", due), "deleted": (None, None),
                "moved": ("ACTIVE", due + 60_000)}

    monkeypatch.setattr(occurrences, "changed_jobs", changed_jobs)
    monkeypatch.setattr(occurrences, "forget_scheduled", forgotten.extend)
    for name in names:
        item = prepared(due, job=name)
        item.early = True
        f.put(due, item)
    f.finish()

    assert [fire for _, fires in publisher.batches for fire in fires] == [due]
    assert all(at >= due for at, _ in publisher.batches)
    ((at, ids),) = looked
    assert due - 3 * 100 <= at < due and ids == sorted(names)
    assert sorted(forgotten) == sorted((str(execution_id_for(job, due)), due)
                                       for job in ("paused", "deleted", "moved"))
    acks = {ack.timer.timer_id: ack.next_ms for batch in recorder.batches for ack in batch.acks}
    assert acks == {f"paused-{due}": None, f"deleted-{due}": None, f"moved-{due}": due + 60_000}
    assert counters.withdrawn == 3 and counters.published == 1


def test_occurrences_prepared_early_go_out_as_prepared_when_the_look_fails(monkeypatch):
    publisher, recorder = NotingPublisher(), NotingRecorder()
    f, counters = _early_firer(publisher, recorder)
    due = now_ms() + 250

    def unreachable(planned):
        raise OperationalError("the database is away")

    monkeypatch.setattr(occurrences, "changed_jobs", unreachable)
    for name in ("a", "b"):
        item = prepared(due, job=name)
        item.early = True
        f.put(due, item)
    f.finish()
    assert sorted(fire for _, fires in publisher.batches for fire in fires) == [due, due]
    assert counters.withdrawn == 0


def test_a_burst_shared_by_tenants_goes_out_in_turns_by_tenant_in_one_batch():
    """Tenant a's 30 jobs and tenant b's 3, due at the same time and prepared in slices under
    copies of the same leases: one batch, b's among the first six messages."""
    publisher, recorder = NotingPublisher(), NotingRecorder()
    sent_jobs = publisher.jobs
    f, _ = firer(publisher, recorder)
    due = now_ms() + BURST_AHEAD_MS
    for slice_start in range(0, 30, 10):  # three slices, each with its own copy of the leases
        leases = dict(LEASES)
        for i in range(slice_start, slice_start + 10):
            f.put(due, prepared(due, job=f"a{i}", tenant="a", leases=leases))
    leases = dict(LEASES)
    for i in range(3):
        f.put(due, prepared(due, job=f"b{i}", tenant="b", leases=leases))
    f.finish()
    (batch,) = sent_jobs
    assert len(batch) == 33
    assert batch[:6] == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert [j for j in batch if j.startswith("a")] == [f"a{i}" for i in range(30)]


def test_a_long_burst_shared_by_tenants_goes_out_head_first_and_the_rest_after_its_confirm():
    """Tenant a's 300 jobs and tenant b's 10 due at once: the first batch is the head (b's ten
    in it, in turns with a's), and the rest goes out only once the head's confirm came."""
    publisher, recorder = NotingPublisher(confirm_ms=10), NotingRecorder()
    sent_jobs = publisher.jobs
    f, _ = firer(publisher, recorder)
    due = now_ms() + BURST_AHEAD_MS
    for i in range(300):
        f.put(due, prepared(due, job=f"a{i}", tenant="a"))
    for i in range(10):
        f.put(due, prepared(due, job=f"b{i}", tenant="b"))
    f.finish()
    head, rest = sent_jobs
    assert len(head) == firing.HEAD_ITEMS and len(rest) == 310 - firing.HEAD_ITEMS
    assert [j for j in head if j.startswith("b")] == [f"b{i}" for i in range(10)]
    assert [j for j in head + rest if j.startswith("a")] == [f"a{i}" for i in range(300)]
    (head_sent, _), (rest_sent, _) = publisher.batches
    head_confirmed = publisher.confirmed[0][0]
    assert head_sent + publisher.confirm_ms <= head_confirmed <= rest_sent
    assert sorted(j for b in recorder.batches for f_ in b.fired for j in [f_.job.job_id]) == \
        sorted([f"a{i}" for i in range(300)] + [f"b{i}" for i in range(10)])


def test_the_rest_of_a_burst_waits_for_its_heads_confirm_no_longer_than_the_bound():
    publisher, recorder = NotingPublisher(confirm_ms=1_000), NotingRecorder()
    f, _ = firer(publisher, recorder)
    due = now_ms() + BURST_AHEAD_MS
    for i in range(150):
        f.put(due, prepared(due, job=f"a{i}", tenant="a"))
    f.put(due, prepared(due, job="b0", tenant="b"))
    f.finish()
    (head_sent, head), (rest_sent, rest) = publisher.batches
    assert (len(head), len(rest)) == (firing.HEAD_ITEMS, 151 - firing.HEAD_ITEMS)
    assert firing.HEAD_WAIT_MS <= rest_sent - head_sent < firing.HEAD_WAIT_MS + 200
    assert len(recorder.batches) == 2


def test_a_long_burst_of_one_tenant_goes_out_in_one_batch():
    publisher, recorder = NotingPublisher(confirm_ms=10), NotingRecorder()
    f, _ = firer(publisher, recorder)
    due = now_ms() + BURST_AHEAD_MS
    for i in range(300):
        f.put(due, prepared(due, job=f"a{i}", tenant="a"))
    f.finish()
    assert [len(fires) for _, fires in publisher.batches] == [300]
