"""Seeing a burst coming (scheduler.bursts): what to prepare now, and when to start next."""

from __future__ import annotations

from scheduler.bursts import (
    INITIAL_RATE_PER_MS,
    MAX_RATE_PER_MS,
    MIN_MEASURED_SLICE,
    SAFETY,
    PrepareRate,
    in_turns,
    prepare_horizon,
)

NOW = 1_000_000


def _horizon(counts, *, assumed_rate: float, now: int = NOW, window_ms: int = 5_000):
    """prepare_horizon with a measured rate that the safety factor turns into ``assumed_rate``."""
    return prepare_horizon(now, counts, ahead_ms=100, rate_per_ms=assumed_rate / SAFETY,
                           window_ms=window_ms)


def test_without_a_burst_only_the_usual_horizon_is_prepared():
    horizon, start_at = _horizon([(NOW + 50, NOW + 55, 3), (NOW + 900, NOW + 905, 2)],
                                 assumed_rate=2.0)
    assert (horizon, start_at) == (NOW + 100, None)


def test_a_burst_that_would_take_longer_than_the_time_left_is_prepared_now():
    # 10,000 due in 1.5 s at 7 a ms: 1,429 ms of preparation, due 100 ms before them.
    horizon, start_at = _horizon([(NOW + 1_500, NOW + 1_820, 10_000)], assumed_rate=7.0)
    assert horizon == NOW + 1_819 and start_at is None


def test_a_burst_further_ahead_names_the_moment_its_preparation_must_start():
    counts = [(NOW + 3_000, NOW + 3_320, 10_000)]
    horizon, start_at = _horizon(counts, assumed_rate=5.0)
    assert horizon == NOW + 100
    assert start_at == NOW + 3_000 - 100 - 2_000
    # At that moment it is prepared.
    assert _horizon(counts, assumed_rate=5.0, now=start_at)[0] == NOW + 3_319


def test_what_comes_before_a_burst_counts_towards_its_preparation_time():
    # 5,000 at +1.0 s alone can wait (500 ms of work, 900 ms left); with 7,000 more at +1.2 s
    # (prepared after them, earliest first: 1,200 ms of work, 1,100 ms left) both start now.
    first = [(NOW + 1_000, NOW + 1_005, 5_000)]
    assert _horizon(first, assumed_rate=10.0)[0] == NOW + 100
    both = first + [(NOW + 1_200, NOW + 1_205, 7_000)]
    assert _horizon(both, assumed_rate=10.0)[0] == NOW + 1_204


def test_the_horizon_stays_inside_the_window():
    horizon, _ = _horizon([(NOW + 1_500, NOW + 1_820, 10_000)], assumed_rate=5.0,
                          window_ms=1_000)
    assert horizon == NOW + 1_000


def test_the_safety_factor_assumes_a_slower_rate_than_measured():
    counts = [(NOW + 1_500, NOW + 1_505, 7_000)]
    # Measured 20 a ms, assumed 10: 700 ms of work, 1,400 ms left: it waits.
    assert prepare_horizon(NOW, counts, ahead_ms=100, rate_per_ms=20.0,
                           window_ms=5_000)[0] == NOW + 100
    # Measured 5 a ms, assumed 2.5: 2,800 ms of work: it starts now.
    assert prepare_horizon(NOW, counts, ahead_ms=100, rate_per_ms=5.0,
                           window_ms=5_000)[0] == NOW + 1_504


def test_the_rate_follows_measured_slices_within_bounds():
    rate = PrepareRate()
    assert rate.per_ms == INITIAL_RATE_PER_MS
    rate.measured(MIN_MEASURED_SLICE - 1, 1.0)  # too small to say anything
    assert rate.per_ms == INITIAL_RATE_PER_MS
    for _ in range(30):
        rate.measured(500, 50.0)  # 10 a ms
    assert 9.9 < rate.per_ms <= 10.0
    for _ in range(30):
        rate.measured(500, 0.001)  # absurdly fast: held to the bound
    assert rate.per_ms <= MAX_RATE_PER_MS


def test_a_steady_flow_is_no_burst_however_much_of_it_lies_ahead():
    # 1,000 a second in 320 ms spans (the wheel's level 1): one a ms, slower than the beat
    # prepares (2 a ms here), so the usual preparation keeps up with it.
    counts = [(NOW + start, NOW + start + 320, 320) for start in range(0, 2_000, 320)]
    assert _horizon(counts, assumed_rate=2.0) == (NOW + 100, None)
    # The same number due in one span is a burst.
    assert _horizon([(NOW + 600, NOW + 920, 2_000)], assumed_rate=2.0)[0] == NOW + 919


def test_in_turns_interleaves_tenants_and_keeps_each_tenant_s_order():
    items = [("a", i) for i in range(5)] + [("b", 0), ("b", 1)] + [("c", 0)]
    assert in_turns(items, lambda item: item[0]) == [
        ("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert in_turns(items[:5], lambda item: item[0]) == items[:5]
