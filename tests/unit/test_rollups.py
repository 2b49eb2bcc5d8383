"""The dashboard's per-minute counters: buckets, quantiles and the accumulator (pure)."""

from __future__ import annotations

import pytest

from scheduler.rollups import (
    ALL_TASKS,
    ALL_TENANTS,
    BENCH_ROLLUPS_OFF,
    BUCKET_BOUNDS_MS,
    BUCKETS,
    Accumulator,
    Counts,
    RollupWriter,
    bucket_of,
    new_accumulator,
    quantile_ms,
)

MINUTE = 60_000


@pytest.mark.parametrize("value, bucket", [(-5, 0), (0, 0), (1, 0), (1.5, 1), (2, 1), (3, 2),
                                           (100, 6), (101, 7), (60_000, 14), (60_001, 15)])
def test_a_value_falls_in_the_first_bucket_whose_bound_holds_it(value, bucket):
    assert bucket_of(value) == bucket


def test_quantile_of_nothing_is_none():
    assert quantile_ms([0] * BUCKETS, 0.99) is None


def test_quantile_interpolates_inside_its_bucket():
    buckets = [0] * BUCKETS
    buckets[bucket_of(75)] = 100  # every value between 50 and 100 ms
    assert quantile_ms(buckets, 0.5) == pytest.approx(75)
    assert quantile_ms(buckets, 0.99) == pytest.approx(99.5)


def test_p99_sees_the_slow_tail():
    buckets = [0] * BUCKETS
    buckets[bucket_of(3)] = 980
    buckets[bucket_of(1_500)] = 20
    assert quantile_ms(buckets, 0.5) <= 5
    assert 1_000 <= quantile_ms(buckets, 0.99) <= 2_000


def test_the_open_last_bucket_reports_its_lower_bound():
    buckets = [0] * BUCKETS
    buckets[-1] = 3
    assert quantile_ms(buckets, 0.99) == BUCKET_BOUNDS_MS[-1]


def test_counts_go_to_their_minute_tenant_and_task_and_to_the_platform_total():
    acc = Accumulator()
    acc.note_dispatched(MINUTE * 10 + 5, "t1", "a", lateness_ms=3)
    acc.note_dispatched(MINUTE * 10 + 59_999, "t2", "a", lateness_ms=30)
    acc.note_started(MINUTE * 11, "t1", "a", lateness_ms=7)
    acc.note_finished(MINUTE * 11 + 1, "t1", "a", succeeded=False, duration_ms=250)
    drained = acc.drain()
    assert drained[(MINUTE * 10, "t1", "a")].dispatched == 1
    assert drained[(MINUTE * 10, "t2", "a")].dispatched == 1
    total = drained[(MINUTE * 10, ALL_TENANTS, "a")]
    assert total.dispatched == 2
    assert total.dispatch_lateness[bucket_of(3)] == 1
    assert total.dispatch_lateness[bucket_of(30)] == 1
    later = drained[(MINUTE * 11, "t1", "a")]
    assert (later.started, later.failed, later.succeeded) == (1, 1, 0)
    assert later.duration_sum_ms == 250
    assert later.duration[bucket_of(250)] == 1
    assert drained[(MINUTE * 10, "t1", ALL_TASKS)].dispatched == 1
    assert drained[(MINUTE * 10, ALL_TENANTS, ALL_TASKS)].dispatched == 2
    assert drained[(MINUTE * 11, ALL_TENANTS, ALL_TASKS)].failed == 1
    assert acc.drain() == {}, "a drain starts the counts again from zero"


def test_counts_put_back_after_a_failed_write_are_not_doubled_in_the_total():
    acc = Accumulator()
    acc.note_started(0, "t1", "a", lateness_ms=1)
    acc.put_back(acc.drain())
    drained = acc.drain()
    assert drained[(0, "t1", "a")].started == 1
    assert drained[(0, ALL_TENANTS, "a")].started == 1
    assert drained[(0, "t1", ALL_TASKS)].started == 1


def test_a_flush_that_fails_outside_postgresql_keeps_the_counts_for_the_next(monkeypatch):
    # The writer thread once died on an error that was not a DatabaseError (pytest-django
    # refusing its connection), and the process counted nothing more for the rest of its life.
    writes: list[dict] = []

    def write(drained: dict) -> None:
        if not writes:
            writes.append({})
            raise RuntimeError("Database access not allowed")
        writes.append(drained)

    monkeypatch.setattr("scheduler.rollups.write_counts", write)
    writer = RollupWriter()
    writer.accumulator.note_started(0, "t1", "a", lateness_ms=1)
    writer.flush()  # fails: kept, nothing raised
    writer.flush()
    assert len(writes) == 2
    assert writes[1][(0, "t1", "a")].started == 1


def test_counts_start_empty():
    counts = Counts()
    assert len(counts.duration) == BUCKETS and not any(counts.duration)


def _noted(acc: Accumulator) -> dict:
    acc.note_dispatched(MINUTE * 10, "t1", "a", lateness_ms=3)
    acc.note_started(MINUTE * 10, "t1", "a", lateness_ms=7)
    acc.note_finished(MINUTE * 10 + 1, "t1", "a", succeeded=True, duration_ms=5)
    return acc.drain()


def test_without_the_bench_switch_a_process_accumulator_counts(monkeypatch):
    monkeypatch.delenv(BENCH_ROLLUPS_OFF, raising=False)
    counts = _noted(new_accumulator())[(MINUTE * 10, "t1", "a")]
    assert (counts.dispatched, counts.started, counts.succeeded) == (1, 1, 1)
    monkeypatch.setenv(BENCH_ROLLUPS_OFF, "0")
    assert _noted(new_accumulator())[(MINUTE * 10, ALL_TENANTS, ALL_TASKS)].dispatched == 1


def test_with_the_bench_switch_a_process_accumulator_counts_nothing(monkeypatch):
    monkeypatch.setenv(BENCH_ROLLUPS_OFF, "1")
    assert _noted(new_accumulator()) == {}


def test_a_bench_switch_other_than_0_or_1_is_refused(monkeypatch):
    monkeypatch.setenv(BENCH_ROLLUPS_OFF, "yes")
    with pytest.raises(ValueError, match="CHRONO_BENCH_ROLLUPS_OFF must be 1"):
        new_accumulator()
