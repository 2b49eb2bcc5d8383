"""Specification of the beat's hierarchical timing wheel (``scheduler.wheel``)."""

from __future__ import annotations

import random
from collections.abc import Hashable

import pytest

from scheduler.wheel import TimingWheel, _Bucket

TICK_MS = 5
WHEEL_SIZE = 64
LEVEL_0_SPAN_MS = TICK_MS * WHEEL_SIZE  # 320 ms
LEVEL_1_SPAN_MS = LEVEL_0_SPAN_MS * WHEEL_SIZE  # 20.48 s
LEVEL_2_SPAN_MS = LEVEL_1_SPAN_MS * WHEEL_SIZE  # ~21.8 min
LEVEL_3_SPAN_MS = LEVEL_2_SPAN_MS * WHEEL_SIZE  # ~23.3 h
HOUR_MS = 3_600_000

# A start time aligned with every level's buckets, so spans are exactly the constants above.
ALIGNED_START_MS = LEVEL_3_SPAN_MS * 1_000


class CountingWheel(TimingWheel):
    """A wheel that records every bucket it cascades."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.flushed: list[tuple[int, int | None]] = []

    def _flush(self, bucket: _Bucket) -> None:
        self.flushed.append((bucket.level, bucket.expiration_ms))
        super()._flush(bucket)


def make_wheel(start_ms: int = ALIGNED_START_MS) -> CountingWheel:
    return CountingWheel(start_ms=start_ms, tick_ms=TICK_MS, wheel_size=WHEEL_SIZE)


def level_of(wheel: TimingWheel, key: Hashable) -> int | None:
    """The level holding ``key``; None while it is in the current tick (or due)."""
    bucket = wheel._timers[key].bucket
    return None if bucket is None else bucket.level


def advance_in_steps(wheel: TimingWheel, until_ms: int, step_ms: int) -> list[tuple[Hashable, int]]:
    fired: list[tuple[Hashable, int]] = []
    now_ms = wheel.current_ms
    while now_ms < until_ms:
        now_ms = min(now_ms + step_ms, until_ms)
        fired.extend(wheel.advance(now_ms))
    return fired


# -- configuration ----------------------------------------------------------------------------


def test_new_wheel_is_empty_at_its_start_time_with_one_level() -> None:
    wheel = TimingWheel(start_ms=1_000)
    assert wheel.current_ms == 1_000
    assert len(wheel) == 0
    assert wheel.levels == 1
    assert wheel.next_fire_ms() is None
    assert wheel.advance(2_000) == []


@pytest.mark.parametrize("tick_ms", [0, -5])
def test_tick_below_one_ms_is_rejected(tick_ms: int) -> None:
    with pytest.raises(ValueError, match="tick_ms"):
        TimingWheel(start_ms=0, tick_ms=tick_ms)


@pytest.mark.parametrize("wheel_size", [1, 0])
def test_wheel_size_below_two_is_rejected(wheel_size: int) -> None:
    with pytest.raises(ValueError, match="wheel_size"):
        TimingWheel(start_ms=0, wheel_size=wheel_size)


def test_non_integer_milliseconds_are_rejected() -> None:
    wheel = TimingWheel(start_ms=0)
    with pytest.raises(TypeError, match="fire_at_ms"):
        wheel.add("job", 10.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="now_ms"):
        wheel.advance(10.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="start_ms"):
        TimingWheel(start_ms=0.0)  # type: ignore[arg-type]


# -- level 0 ----------------------------------------------------------------------------------


def test_timer_within_level_zero_fires_at_exactly_its_time() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 123
    wheel.add("job", fire_at_ms)
    assert level_of(wheel, "job") == 0
    assert wheel.advance(fire_at_ms - 1) == []
    assert wheel.advance(fire_at_ms) == [("job", fire_at_ms)]
    assert "job" not in wheel
    assert len(wheel) == 0


def test_timer_is_returned_with_its_exact_fire_time_when_advance_overshoots() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 7)
    assert wheel.advance(ALIGNED_START_MS + 300) == [("job", ALIGNED_START_MS + 7)]


def test_timer_later_in_a_reached_bucket_stays_until_its_millisecond() -> None:
    wheel = make_wheel()
    bucket_start_ms = ALIGNED_START_MS + 50
    wheel.add("early", bucket_start_ms + 1)
    wheel.add("late", bucket_start_ms + TICK_MS - 1)
    assert wheel.advance(bucket_start_ms) == []
    assert wheel.advance(bucket_start_ms + 1) == [("early", bucket_start_ms + 1)]
    for now_ms in range(bucket_start_ms + 2, bucket_start_ms + TICK_MS - 1):
        assert wheel.advance(now_ms) == []
    assert wheel.advance(bucket_start_ms + TICK_MS - 1) == [("late", bucket_start_ms + TICK_MS - 1)]


def test_timer_within_the_current_tick_waits_for_its_millisecond() -> None:
    start_ms = ALIGNED_START_MS + 1
    wheel = make_wheel(start_ms)
    wheel.add("job", start_ms + 3)
    assert level_of(wheel, "job") is None
    assert wheel.advance(start_ms + 2) == []
    assert wheel.advance(start_ms + 3) == [("job", start_ms + 3)]


def test_every_millisecond_of_level_zero_fires_exactly_on_time() -> None:
    wheel = make_wheel()
    for offset_ms in range(LEVEL_0_SPAN_MS):
        wheel.add(offset_ms, ALIGNED_START_MS + offset_ms)
    for offset_ms in range(LEVEL_0_SPAN_MS):
        assert wheel.advance(ALIGNED_START_MS + offset_ms) == [
            (offset_ms, ALIGNED_START_MS + offset_ms)
        ]
    assert len(wheel) == 0


def test_bucket_slots_are_reused_as_the_wheel_turns_many_times() -> None:
    wheel = make_wheel()
    fired = []
    for turn in range(5 * WHEEL_SIZE):
        now_ms = ALIGNED_START_MS + turn * 37
        wheel.add(turn, now_ms + LEVEL_0_SPAN_MS - 1)
        fired.extend(wheel.advance(now_ms))
    fired.extend(wheel.advance(ALIGNED_START_MS + 10 * LEVEL_1_SPAN_MS))
    assert fired == [
        (turn, ALIGNED_START_MS + turn * 37 + LEVEL_0_SPAN_MS - 1) for turn in range(5 * WHEEL_SIZE)
    ]


# -- level 1 and the cascade ------------------------------------------------------------------


def test_timer_beyond_level_zero_span_is_held_in_level_one() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 5_000)
    assert level_of(wheel, "job") == 1
    assert wheel.levels == 2


def test_level_one_timer_cascades_to_level_zero_and_fires_at_exactly_its_time() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 5_003
    wheel.add("job", fire_at_ms)
    level_one_bucket_start_ms = fire_at_ms - fire_at_ms % LEVEL_0_SPAN_MS
    assert wheel.advance(level_one_bucket_start_ms) == []
    assert wheel.flushed == [(1, level_one_bucket_start_ms)]
    assert level_of(wheel, "job") == 0
    assert wheel.advance(fire_at_ms - 1) == []
    assert level_of(wheel, "job") is None
    assert wheel.advance(fire_at_ms) == [("job", fire_at_ms)]


def test_level_one_timer_fires_on_time_when_advanced_a_millisecond_at_a_time() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 1_234
    wheel.add("job", fire_at_ms)
    assert advance_in_steps(wheel, fire_at_ms - 1, 1) == []
    assert wheel.advance(fire_at_ms) == [("job", fire_at_ms)]


# Offsets from an aligned start: the last millisecond of each level, its span, one past it.
@pytest.mark.parametrize(
    ("offset_ms", "expected_level"),
    [
        (TICK_MS - 1, None),
        (TICK_MS, 0),
        (TICK_MS + 1, 0),
        (LEVEL_0_SPAN_MS - 1, 0),
        (LEVEL_0_SPAN_MS, 1),
        (LEVEL_0_SPAN_MS + 1, 1),
        (LEVEL_1_SPAN_MS - 1, 1),
        (LEVEL_1_SPAN_MS, 2),
        (LEVEL_1_SPAN_MS + 1, 2),
        (LEVEL_2_SPAN_MS - 1, 2),
        (LEVEL_2_SPAN_MS, 3),
        (LEVEL_2_SPAN_MS + 1, 3),
        (LEVEL_3_SPAN_MS - 1, 3),
        (LEVEL_3_SPAN_MS, 4),
        (LEVEL_3_SPAN_MS + 1, 4),
    ],
)
def test_timer_at_a_level_boundary_lands_in_the_right_level_and_fires_exactly(
    offset_ms: int, expected_level: int | None
) -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + offset_ms
    wheel.add("job", fire_at_ms)
    assert level_of(wheel, "job") == expected_level
    assert wheel.next_fire_ms() == fire_at_ms
    assert wheel.advance(fire_at_ms - 1) == []
    assert wheel.advance(fire_at_ms) == [("job", fire_at_ms)]


@pytest.mark.parametrize("start_offset_ms", [1, TICK_MS - 1, 17, LEVEL_0_SPAN_MS - 1])
@pytest.mark.parametrize(
    "distance_ms",
    [
        LEVEL_0_SPAN_MS - 1,
        LEVEL_0_SPAN_MS,
        LEVEL_0_SPAN_MS + 1,
        LEVEL_1_SPAN_MS - 1,
        LEVEL_1_SPAN_MS,
        LEVEL_1_SPAN_MS + 1,
        LEVEL_2_SPAN_MS - 1,
        LEVEL_2_SPAN_MS,
        LEVEL_2_SPAN_MS + 1,
    ],
)
def test_timer_near_a_boundary_fires_exactly_when_the_start_is_not_aligned(
    start_offset_ms: int, distance_ms: int
) -> None:
    start_ms = ALIGNED_START_MS + start_offset_ms
    wheel = make_wheel(start_ms)
    fire_at_ms = start_ms + distance_ms
    wheel.add("job", fire_at_ms)
    assert wheel.advance(fire_at_ms - 1) == []
    assert wheel.advance(fire_at_ms) == [("job", fire_at_ms)]


def test_boundary_timers_fire_exactly_when_advanced_one_tick_at_a_time() -> None:
    wheel = make_wheel()
    offsets_ms = [LEVEL_0_SPAN_MS - 1, LEVEL_0_SPAN_MS, LEVEL_0_SPAN_MS + 1]
    offsets_ms += [LEVEL_1_SPAN_MS - 1, LEVEL_1_SPAN_MS, LEVEL_1_SPAN_MS + 1]
    for offset_ms in offsets_ms:
        wheel.add(offset_ms, ALIGNED_START_MS + offset_ms)
    fired = advance_in_steps(wheel, ALIGNED_START_MS + LEVEL_1_SPAN_MS + TICK_MS, TICK_MS)
    assert fired == [(offset_ms, ALIGNED_START_MS + offset_ms) for offset_ms in offsets_ms]


# -- overflow levels --------------------------------------------------------------------------


def test_overflow_levels_are_created_only_when_a_timer_lies_beyond_them() -> None:
    wheel = make_wheel()
    wheel.add("soon", ALIGNED_START_MS + 100)
    assert wheel.levels == 1
    wheel.add("in_a_minute", ALIGNED_START_MS + 60_000)
    assert wheel.levels == 3
    assert level_of(wheel, "in_a_minute") == 2
    wheel.add("in_an_hour", ALIGNED_START_MS + HOUR_MS)
    assert wheel.levels == 4
    assert level_of(wheel, "in_an_hour") == 3


def test_level_three_timer_cascades_through_every_level_and_fires_exactly() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 2 * HOUR_MS + 4_321
    wheel.add("job", fire_at_ms)
    assert level_of(wheel, "job") == 3
    assert wheel.advance(fire_at_ms - 1) == []
    assert [level for level, _ in wheel.flushed] == [3, 2, 1, 0]
    assert wheel.advance(fire_at_ms) == [("job", fire_at_ms)]


def test_timer_far_beyond_level_three_fires_exactly() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 400 * 24 * HOUR_MS + 1
    wheel.add("next_year", fire_at_ms)
    assert wheel.levels == 6
    assert wheel.next_fire_ms() == fire_at_ms
    assert wheel.advance(fire_at_ms - 1) == []
    assert wheel.advance(fire_at_ms) == [("next_year", fire_at_ms)]


def test_timer_added_after_the_wheel_moved_far_lands_relative_to_the_new_time() -> None:
    wheel = make_wheel()
    wheel.advance(ALIGNED_START_MS + 10 * HOUR_MS + 3)
    fire_at_ms = wheel.current_ms + 100
    wheel.add("job", fire_at_ms)
    assert level_of(wheel, "job") == 0
    assert wheel.advance(fire_at_ms) == [("job", fire_at_ms)]


# -- replacing and removing -------------------------------------------------------------------


def test_adding_an_existing_key_with_an_earlier_time_replaces_it() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 30_000)
    wheel.add("job", ALIGNED_START_MS + 200)
    assert len(wheel) == 1
    assert wheel.fire_time_of("job") == ALIGNED_START_MS + 200
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 200
    assert wheel.advance(ALIGNED_START_MS + 200) == [("job", ALIGNED_START_MS + 200)]
    assert wheel.advance(ALIGNED_START_MS + 60_000) == []


def test_adding_an_existing_key_with_a_later_time_replaces_it() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 200)
    wheel.add("job", ALIGNED_START_MS + 30_000)
    assert len(wheel) == 1
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 30_000
    assert wheel.advance(ALIGNED_START_MS + 29_999) == []
    assert wheel.advance(ALIGNED_START_MS + 30_000) == [("job", ALIGNED_START_MS + 30_000)]


def test_replacing_a_key_within_the_current_tick_fires_it_once_at_the_new_time() -> None:
    start_ms = ALIGNED_START_MS + 1
    wheel = make_wheel(start_ms)
    wheel.add("job", start_ms + 1)
    wheel.add("job", start_ms + 3)
    assert wheel.advance(start_ms + 2) == []
    assert wheel.advance(start_ms + 3) == [("job", start_ms + 3)]


def test_replacing_a_key_with_a_past_time_makes_it_due_now() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 30_000)
    wheel.add("job", ALIGNED_START_MS - 10)
    assert wheel.advance(ALIGNED_START_MS) == [("job", ALIGNED_START_MS - 10)]
    assert wheel.advance(ALIGNED_START_MS + 60_000) == []


def test_removing_a_timer_before_its_cascade_means_it_never_fires() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 5_000)
    assert wheel.remove("job") is True
    assert "job" not in wheel
    assert wheel.fire_time_of("job") is None
    assert wheel.advance(ALIGNED_START_MS + 10_000) == []


def test_removing_a_timer_after_its_cascade_means_it_never_fires() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 5_003
    wheel.add("job", fire_at_ms)
    wheel.advance(fire_at_ms - 100)
    assert level_of(wheel, "job") == 0
    assert wheel.remove("job") is True
    assert wheel.advance(fire_at_ms + 10_000) == []


def test_removing_a_timer_within_the_current_tick_means_it_never_fires() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 5_003
    wheel.add("job", fire_at_ms)
    wheel.advance(fire_at_ms - 1)
    assert level_of(wheel, "job") is None
    assert wheel.remove("job") is True
    assert wheel.next_fire_ms() is None
    assert wheel.advance(fire_at_ms) == []


def test_removing_a_due_now_timer_means_it_is_not_returned() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS - 1)
    assert wheel.remove("job") is True
    assert wheel.advance(ALIGNED_START_MS) == []


def test_removing_an_unknown_removed_or_fired_key_returns_false() -> None:
    wheel = make_wheel()
    assert wheel.remove("never_added") is False
    wheel.add("removed", ALIGNED_START_MS + 10)
    wheel.remove("removed")
    assert wheel.remove("removed") is False
    wheel.add("fired", ALIGNED_START_MS + 10)
    wheel.advance(ALIGNED_START_MS + 10)
    assert wheel.remove("fired") is False


def test_a_key_can_be_added_again_after_it_fired() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 10)
    assert wheel.advance(ALIGNED_START_MS + 10) == [("job", ALIGNED_START_MS + 10)]
    wheel.add("job", ALIGNED_START_MS + 20)
    assert wheel.advance(ALIGNED_START_MS + 20) == [("job", ALIGNED_START_MS + 20)]


def test_many_removals_within_the_current_tick_do_not_leak() -> None:
    start_ms = ALIGNED_START_MS + 1
    wheel = make_wheel(start_ms)
    for round_number in range(1_000):
        wheel.add(round_number, start_ms + 2)
        wheel.remove(round_number)
    assert len(wheel._near) < 200
    assert wheel.next_fire_ms() is None
    assert wheel.advance(start_ms + 2) == []


def test_many_replacements_of_one_due_now_key_return_it_once() -> None:
    wheel = make_wheel()
    for offset_ms in range(1_000):
        wheel.add("job", ALIGNED_START_MS - offset_ms)
    assert len(wheel) == 1
    assert wheel.advance(ALIGNED_START_MS) == [("job", ALIGNED_START_MS - 999)]


# -- due now and the direction of time --------------------------------------------------------


def test_timer_in_the_past_is_returned_by_the_next_advance() -> None:
    wheel = make_wheel()
    wheel.add("late", ALIGNED_START_MS - 60_000)
    assert wheel.next_fire_ms() == ALIGNED_START_MS - 60_000
    assert wheel.advance(ALIGNED_START_MS) == [("late", ALIGNED_START_MS - 60_000)]


def test_timer_at_exactly_the_current_time_is_due_now() -> None:
    start_ms = ALIGNED_START_MS + 2
    wheel = make_wheel(start_ms)
    wheel.add("now", start_ms)
    assert wheel.advance(start_ms) == [("now", start_ms)]


def test_due_now_timers_come_before_later_ones_in_the_same_advance() -> None:
    wheel = make_wheel()
    wheel.advance(ALIGNED_START_MS + 1_000)
    wheel.add("later", ALIGNED_START_MS + 1_500)
    wheel.add("late", ALIGNED_START_MS + 900)
    assert wheel.advance(ALIGNED_START_MS + 2_000) == [
        ("late", ALIGNED_START_MS + 900),
        ("later", ALIGNED_START_MS + 1_500),
    ]


def test_advance_to_an_earlier_time_keeps_the_clock_and_returns_only_due_now_timers() -> None:
    start_ms = ALIGNED_START_MS + 1
    wheel = make_wheel(start_ms)
    wheel.add("due", start_ms - 5)
    wheel.add("later_in_this_tick", start_ms + 2)
    wheel.add("next_second", start_ms + 1_000)
    assert wheel.advance(start_ms - 100) == [("due", start_ms - 5)]
    assert wheel.current_ms == start_ms
    assert wheel.advance(start_ms - 100) == []
    assert wheel.fire_time_of("later_in_this_tick") == start_ms + 2
    assert wheel.advance(start_ms + 1_000) == [
        ("later_in_this_tick", start_ms + 2),
        ("next_second", start_ms + 1_000),
    ]


def test_advance_to_the_current_time_fires_nothing_new() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 1)
    assert wheel.advance(ALIGNED_START_MS) == []
    assert wheel.current_ms == ALIGNED_START_MS


def test_current_ms_is_the_exact_time_passed_to_advance() -> None:
    wheel = make_wheel()
    wheel.advance(ALIGNED_START_MS + 12_345)
    assert wheel.current_ms == ALIGNED_START_MS + 12_345


# -- long idle gaps ---------------------------------------------------------------------------


def test_advance_over_an_hour_idle_returns_everything_in_order() -> None:
    wheel = make_wheel()
    fire_times_ms = [ALIGNED_START_MS + offset_ms for offset_ms in (7, 400, 21_000, HOUR_MS - 1)]
    for index, fire_at_ms in enumerate(reversed(fire_times_ms)):
        wheel.add(index, fire_at_ms)
    fired = wheel.advance(ALIGNED_START_MS + HOUR_MS)
    assert [fire_at_ms for _, fire_at_ms in fired] == fire_times_ms
    assert len(wheel) == 0


def test_advance_over_an_hour_idle_touches_few_buckets_not_every_tick() -> None:
    wheel = make_wheel()
    rng = random.Random(7)
    for key in range(100):
        wheel.add(key, ALIGNED_START_MS + rng.randrange(HOUR_MS))
    fired = wheel.advance(ALIGNED_START_MS + HOUR_MS)
    assert len(fired) == 100
    elapsed_ticks = HOUR_MS // TICK_MS
    # Each timer cascades through at most one bucket per level (four levels for an hour).
    assert len(wheel.flushed) <= 100 * 4
    assert len(wheel.flushed) < elapsed_ticks / 1_000


def test_advance_over_a_day_with_no_timers_touches_no_bucket() -> None:
    wheel = make_wheel()
    assert wheel.advance(ALIGNED_START_MS + 24 * HOUR_MS) == []
    assert wheel.flushed == []


def test_wheel_keeps_firing_exactly_after_a_long_pause() -> None:
    wheel = make_wheel()
    wheel.add("before", ALIGNED_START_MS + 50)
    wheel.advance(ALIGNED_START_MS + 3 * HOUR_MS + 17)
    fire_at_ms = wheel.current_ms + LEVEL_0_SPAN_MS + 2
    wheel.add("after", fire_at_ms)
    assert wheel.advance(fire_at_ms - 1) == []
    assert wheel.advance(fire_at_ms) == [("after", fire_at_ms)]


# -- ordering ---------------------------------------------------------------------------------


def test_returned_entries_are_sorted_by_fire_time_whatever_the_insertion_order() -> None:
    wheel = make_wheel()
    offsets_ms = [90_000, 3, 700, 20_480, 319, 4, 320, 1, 50_000, 321]
    for offset_ms in offsets_ms:
        wheel.add(f"job-{offset_ms}", ALIGNED_START_MS + offset_ms)
    fired = wheel.advance(ALIGNED_START_MS + 100_000)
    assert fired == [
        (f"job-{offset_ms}", ALIGNED_START_MS + offset_ms) for offset_ms in sorted(offsets_ms)
    ]


def test_timers_sharing_a_fire_time_are_all_returned_together() -> None:
    wheel = make_wheel()
    fire_at_ms = ALIGNED_START_MS + 25_000
    for key in range(50):
        wheel.add(key, fire_at_ms)
    wheel.add("before", fire_at_ms - 1)
    wheel.add("after", fire_at_ms + 1)
    assert wheel.advance(fire_at_ms - 1) == [("before", fire_at_ms - 1)]
    fired = wheel.advance(fire_at_ms)
    assert sorted(key for key, _ in fired) == list(range(50))
    assert {fired_at_ms for _, fired_at_ms in fired} == {fire_at_ms}
    assert wheel.advance(fire_at_ms + 1) == [("after", fire_at_ms + 1)]


def test_keys_of_mixed_unorderable_types_are_accepted() -> None:
    wheel = make_wheel()
    keys: list[Hashable] = ["a", 1, ("shard", 3), None, frozenset({2})]
    for key in keys:
        wheel.add(key, ALIGNED_START_MS + 10)
    assert {key for key, _ in wheel.advance(ALIGNED_START_MS + 10)} == set(keys)


# -- next_fire_ms -----------------------------------------------------------------------------


def test_next_fire_ms_follows_adds_removes_and_advances() -> None:
    wheel = make_wheel()
    assert wheel.next_fire_ms() is None
    wheel.add("b", ALIGNED_START_MS + 30_000)
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 30_000
    wheel.add("a", ALIGNED_START_MS + 500)
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 500
    wheel.add("c", ALIGNED_START_MS + 501)
    wheel.remove("a")
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 501
    wheel.advance(ALIGNED_START_MS + 501)
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 30_000
    wheel.add("due", ALIGNED_START_MS)
    assert wheel.next_fire_ms() == ALIGNED_START_MS
    wheel.advance(ALIGNED_START_MS + 30_000)
    assert wheel.next_fire_ms() is None


def test_next_fire_ms_finds_a_fine_timer_behind_a_coarse_bucket_that_starts_earlier() -> None:
    # At 300 ms past an aligned start, level 0 reaches 620 ms while level 1's next bucket starts
    # at 320 ms, so that bucket holds 620..639 ms yet is scheduled before level 0's later buckets.
    start_ms = ALIGNED_START_MS + 300
    wheel = make_wheel(start_ms)
    wheel.add("coarse", ALIGNED_START_MS + 630)
    wheel.add("fine", ALIGNED_START_MS + 610)
    assert level_of(wheel, "coarse") == 1
    assert level_of(wheel, "fine") == 0
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 610
    wheel.remove("fine")
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 630


def test_next_fire_ms_ignores_buckets_emptied_by_removal() -> None:
    wheel = make_wheel()
    for key in range(100):
        wheel.add(key, ALIGNED_START_MS + 100 + key * 7)
    wheel.add("last", ALIGNED_START_MS + 90_000)
    for key in range(100):
        wheel.remove(key)
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 90_000


def test_next_fire_ms_recomputes_a_bucket_whose_earliest_timer_was_removed() -> None:
    wheel = make_wheel()
    wheel.add("first", ALIGNED_START_MS + 5_001)
    wheel.add("second", ALIGNED_START_MS + 5_002)
    wheel.add("third", ALIGNED_START_MS + 5_010)
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 5_001
    wheel.remove("first")
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 5_002
    wheel.add("first", ALIGNED_START_MS + 5_003)
    wheel.remove("second")
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 5_003


def test_next_fire_ms_does_not_move_the_clock_or_fire_anything() -> None:
    wheel = make_wheel()
    wheel.add("job", ALIGNED_START_MS + 90_000)
    assert wheel.next_fire_ms() == ALIGNED_START_MS + 90_000
    assert wheel.current_ms == ALIGNED_START_MS
    assert wheel.flushed == []
    assert "job" in wheel


# -- membership -------------------------------------------------------------------------------


def test_len_contains_and_fire_time_of_follow_the_timers_held() -> None:
    wheel = make_wheel()
    wheel.add("a", ALIGNED_START_MS + 10)
    wheel.add("b", ALIGNED_START_MS + 90_000)
    assert len(wheel) == 2
    assert "a" in wheel
    assert "z" not in wheel
    assert wheel.fire_time_of("b") == ALIGNED_START_MS + 90_000
    assert wheel.fire_time_of("z") is None
    wheel.advance(ALIGNED_START_MS + 10)
    assert len(wheel) == 1
    assert "a" not in wheel


# -- against a reference model ----------------------------------------------------------------


class ReferenceTimers:
    """The obviously correct model: a dict, scanned in full on every call."""

    def __init__(self, start_ms: int) -> None:
        self.current_ms = start_ms
        self.fire_at_ms: dict[Hashable, int] = {}

    def add(self, key: Hashable, fire_at_ms: int) -> None:
        self.fire_at_ms[key] = fire_at_ms

    def remove(self, key: Hashable) -> bool:
        return self.fire_at_ms.pop(key, None) is not None

    def advance(self, now_ms: int) -> list[tuple[Hashable, int]]:
        self.current_ms = max(self.current_ms, now_ms)
        due = sorted(
            (fire_at_ms, key)
            for key, fire_at_ms in self.fire_at_ms.items()
            if fire_at_ms <= self.current_ms
        )
        for _, key in due:
            del self.fire_at_ms[key]
        return [(key, fire_at_ms) for fire_at_ms, key in due]

    def next_fire_ms(self) -> int | None:
        return min(self.fire_at_ms.values(), default=None)


def random_fire_time(rng: random.Random, now_ms: int) -> int:
    """Mostly the next few seconds, with some past, boundary-hugging and far-away times."""
    kind = rng.random()
    if kind < 0.05:
        return now_ms - rng.randrange(0, 1_000)
    if kind < 0.15:
        span_ms = rng.choice([TICK_MS, LEVEL_0_SPAN_MS, LEVEL_1_SPAN_MS, LEVEL_2_SPAN_MS])
        return now_ms - now_ms % span_ms + span_ms * rng.randrange(1, 3) + rng.randrange(-2, 3)
    if kind < 0.20:
        return now_ms + rng.randrange(LEVEL_1_SPAN_MS, 3 * HOUR_MS)
    return now_ms + rng.randrange(0, 5_000)


def advance_both(
    wheel: TimingWheel, reference: ReferenceTimers, now_ms: int
) -> list[tuple[Hashable, int]]:
    fired = wheel.advance(now_ms)
    expected = reference.advance(now_ms)
    fire_times_ms = [fire_at_ms for _, fire_at_ms in fired]
    assert fire_times_ms == sorted(fire_times_ms)
    assert all(fire_at_ms <= max(now_ms, wheel.current_ms) for fire_at_ms in fire_times_ms)
    assert sorted(fired, key=lambda entry: (entry[1], entry[0])) == expected
    return fired


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_timers_fire_exactly_once_never_early_never_late(seed: int) -> None:
    rng = random.Random(seed)
    start_ms = ALIGNED_START_MS + rng.randrange(LEVEL_1_SPAN_MS)
    wheel = TimingWheel(start_ms=start_ms, tick_ms=TICK_MS, wheel_size=WHEEL_SIZE)
    reference = ReferenceTimers(start_ms)
    fired_keys: list[int] = []
    now_ms = start_ms
    next_key = 0
    while next_key < 20_000:
        for _ in range(rng.randrange(0, 60)):
            fire_at_ms = random_fire_time(rng, now_ms)
            wheel.add(next_key, fire_at_ms)
            reference.add(next_key, fire_at_ms)
            next_key += 1
        for _ in range(rng.randrange(0, 4)):
            key = rng.randrange(next_key)
            if rng.random() < 0.5:
                assert wheel.remove(key) == reference.remove(key)
            elif key in reference.fire_at_ms:
                fire_at_ms = random_fire_time(rng, now_ms)
                wheel.add(key, fire_at_ms)
                reference.add(key, fire_at_ms)
        step = rng.random()
        if step < 0.03:
            now_ms += rng.randrange(LEVEL_1_SPAN_MS, HOUR_MS)
        elif step < 0.06:
            now_ms -= rng.randrange(0, 50)
        else:
            now_ms += rng.randrange(0, 40)
        fired_keys.extend(key for key, _ in advance_both(wheel, reference, now_ms))
        assert wheel.next_fire_ms() == reference.next_fire_ms()
        assert len(wheel) == len(reference.fire_at_ms)
    fired_keys.extend(key for key, _ in advance_both(wheel, reference, now_ms + 4 * HOUR_MS))
    assert len(wheel) == 0
    assert wheel.next_fire_ms() is None
    assert len(fired_keys) == len(set(fired_keys))


@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(1, 2), (1, 3), (7, 5), (10, 20)])
def test_random_timers_match_the_reference_for_other_wheel_shapes(
    tick_ms: int, wheel_size: int
) -> None:
    rng = random.Random(tick_ms * 1_000 + wheel_size)
    start_ms = rng.randrange(10**6)
    wheel = TimingWheel(start_ms=start_ms, tick_ms=tick_ms, wheel_size=wheel_size)
    reference = ReferenceTimers(start_ms)
    now_ms = start_ms
    for key in range(3_000):
        fire_at_ms = now_ms + rng.randrange(-20, 20_000)
        wheel.add(key, fire_at_ms)
        reference.add(key, fire_at_ms)
        if rng.random() < 0.1:
            victim = rng.randrange(key + 1)
            assert wheel.remove(victim) == reference.remove(victim)
        now_ms += rng.choice([0, 1, 2, 3, 11, 250])
        advance_both(wheel, reference, now_ms)
        assert wheel.next_fire_ms() == reference.next_fire_ms()
    advance_both(wheel, reference, now_ms + 30_000)
    assert len(wheel) == 0


def test_due_counts_forecast_how_many_timers_fall_due_and_when():
    wheel = TimingWheel(start_ms=0, tick_ms=5, wheel_size=64)
    for i in range(300):
        wheel.add(f"burst-{i}", 1_000)  # a burst in a level-1 bucket (320 ms wide)
    wheel.add("soon", 12)
    wheel.add("now", 0)
    wheel.add("far", 50_000)
    wheel.remove("burst-0")
    counts = wheel.due_counts(until_ms=2_000)
    assert counts[0] == (0, 1, 1)  # the current tick's
    assert (10, 15, 1) in counts
    burst = [c for c in counts if c[0] <= 1_000 < c[1]]
    assert len(burst) == 1 and burst[0][2] == 299
    assert sum(c[2] for c in counts) == 301  # "far" lies beyond until_ms
    assert sum(c[2] for c in wheel.due_counts(until_ms=60_000, levels=3)) == 302
    wheel.advance(1_000)
    assert sum(c[2] for c in wheel.due_counts(until_ms=2_000)) == 0


def test_due_counts_leave_out_the_coarse_levels():
    wheel = TimingWheel(start_ms=0, tick_ms=5, wheel_size=64)
    for i in range(100):
        wheel.add(f"steady-{i}", 25_000 + i * 100)  # a level-2 bucket (20.48 s wide)
    wheel.add("near", 1_000)
    assert [c[2] for c in wheel.due_counts(until_ms=60_000)] == [1]
    assert sum(c[2] for c in wheel.due_counts(until_ms=60_000, levels=3)) == 101
