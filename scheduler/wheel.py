"""Hierarchical timing wheel holding the timers a beat process will fire in the next few seconds.

The beat loads timers from Redis a window ahead and keeps them here until they come due; a timer
created inside the window is added at once. The wheel is pure logic: the clock is passed in as
integer milliseconds and nothing here sleeps or does I/O.

Layout (Kafka's ``TimingWheel``)
--------------------------------
Level 0 has ``wheel_size`` buckets of ``tick_ms`` each; a bucket of level ``k`` spans
``tick_ms * wheel_size**k`` ms, so level ``k`` as a whole spans ``tick_ms * wheel_size**(k + 1)``
ms, measured from the start of the level's current bucket. A timer goes to the finest level whose
span covers it. Levels above 0 are created lazily, the first time a timer lies beyond every
existing level (Kafka's overflow wheel).

A bucket can only say "somewhere in these ``tick_ms``", and the wheel must never fire early, so the
timers of the current level-0 tick, including those already due, are kept apart in a small heap
ordered by exact fire time (``_near``). It is also the "due now" list: a timer added at or before
the current time lands there and is returned by the next ``advance()``.

Advancing (Kafka's ``DelayQueue`` of ``TimerTaskList``)
-------------------------------------------------------
Every bucket that has been given timers sits in a heap keyed by its expiration, the first
millisecond it covers. ``advance(now_ms)`` pops the buckets whose expiration is at or before
``now_ms`` in order; for each it sets the clock to that expiration and re-inserts the bucket's
timers (the cascade), which puts each one in a finer level or in ``_near``. It then returns the
entries of ``_near`` due by ``now_ms``. The work is proportional to the buckets passed and the
entries returned, never to the ticks elapsed, so a beat that was paused for an hour catches up in
one call that touches only the buckets that hold timers.

Insert and remove cost O(1) in the number of timers (insert walks the few levels: at most 10 for
any 64-bit millisecond time with the defaults). Remove from ``_near`` is lazy: the heap entry is
left behind and skipped when it surfaces, and the heap is compacted when such entries pile up.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable

DEFAULT_TICK_MS = 5
DEFAULT_WHEEL_SIZE = 64

# Rebuild ``_near`` once this many removed entries linger in it and they outnumber the live ones.
_NEAR_COMPACTION_MIN_STALE = 64


class _Timer:
    """One key's fire time and where the wheel keeps it (a bucket, or ``_near`` when None)."""

    __slots__ = ("key", "fire_at_ms", "bucket")

    def __init__(self, key: Hashable, fire_at_ms: int) -> None:
        self.key = key
        self.fire_at_ms = fire_at_ms
        self.bucket: _Bucket | None = None


class _Bucket:
    """The timers of one span of one level, and the first millisecond of that span.

    ``expiration_ms`` is None while the bucket is not in the wheel's bucket heap. ``_earliest_ms``
    caches the earliest fire time held; None means "unknown, compute on demand" (after the
    earliest timer was removed), which keeps ``next_fire_ms()`` cheap for crowded coarse buckets.
    """

    __slots__ = ("level", "slot", "expiration_ms", "timers", "_earliest_ms")

    def __init__(self, level: int, slot: int) -> None:
        self.level = level
        self.slot = slot
        self.expiration_ms: int | None = None
        self.timers: dict[Hashable, _Timer] = {}
        self._earliest_ms: int | None = None

    def add(self, timer: _Timer) -> None:
        """Hold ``timer`` in this bucket."""
        if not self.timers:
            self._earliest_ms = timer.fire_at_ms
        elif self._earliest_ms is not None and timer.fire_at_ms < self._earliest_ms:
            self._earliest_ms = timer.fire_at_ms
        self.timers[timer.key] = timer
        timer.bucket = self

    def discard(self, timer: _Timer) -> None:
        """Stop holding ``timer``."""
        del self.timers[timer.key]
        if timer.fire_at_ms == self._earliest_ms:
            self._earliest_ms = None

    def earliest_fire_ms(self) -> int:
        """The earliest fire time held; the bucket must not be empty."""
        if self._earliest_ms is None:
            self._earliest_ms = min(timer.fire_at_ms for timer in self.timers.values())
        return self._earliest_ms

    def take_all(self) -> list[_Timer]:
        """Empty the bucket, take it out of the wheel's schedule and return what it held."""
        timers = list(self.timers.values())
        self.timers = {}
        self._earliest_ms = None
        self.expiration_ms = None
        return timers


class TimingWheel:
    """Timers keyed by any hashable, fired at exact milliseconds, never early.

    Each key has one fire time; adding a key again replaces it. ``advance(now_ms)`` moves the clock
    forward and returns ``(key, fire_at_ms)`` for every timer with ``fire_at_ms <= now_ms``, sorted
    by fire time. The clock never moves backwards: an ``advance()`` to an earlier time only returns
    timers already due at the current time (those added at or before it since the last advance).
    """

    def __init__(
        self,
        *,
        start_ms: int,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
    ) -> None:
        _require_int("start_ms", start_ms)
        _require_int("tick_ms", tick_ms)
        _require_int("wheel_size", wheel_size)
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be at least 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be at least 2, got {wheel_size}")
        self._tick_ms = tick_ms
        self._wheel_size = wheel_size
        self._current_ms = start_ms
        self._timers: dict[Hashable, _Timer] = {}
        self._levels: list[list[_Bucket]] = []
        self._bucket_ticks_ms: list[int] = []
        self._bucket_heap: list[tuple[int, int, int]] = []  # (expiration_ms, level, slot)
        self._near: list[tuple[int, int, _Timer]] = []  # (fire_at_ms, tie-breaker, timer)
        self._near_stale = 0
        self._sequence = itertools.count()
        self._add_level()

    # -- public interface -------------------------------------------------------------------

    @property
    def current_ms(self) -> int:
        """The wheel's time: the latest ``now_ms`` passed to ``advance()``, or ``start_ms``."""
        return self._current_ms

    @property
    def levels(self) -> int:
        """How many levels exist so far (1 until a timer lies beyond level 0's span)."""
        return len(self._levels)

    def add(self, key: Hashable, fire_at_ms: int) -> None:
        """Fire ``key`` at ``fire_at_ms``, replacing any fire time it had.

        A fire time at or before ``current_ms`` is due now: the next ``advance()`` returns it.
        """
        _require_int("fire_at_ms", fire_at_ms)
        self.remove(key)
        timer = _Timer(key, fire_at_ms)
        self._timers[key] = timer
        self._place(timer)

    def remove(self, key: Hashable) -> bool:
        """Forget ``key``'s timer; True if there was one."""
        timer = self._timers.pop(key, None)
        if timer is None:
            return False
        if timer.bucket is not None:
            timer.bucket.discard(timer)
        else:
            self._near_stale += 1
            self._compact_near_if_crowded()
        return True

    def advance(self, now_ms: int) -> list[tuple[Hashable, int]]:
        """Move the clock to ``now_ms`` and return every timer due by then, by fire time.

        Returned timers leave the wheel. ``now_ms`` before ``current_ms`` leaves the clock where it
        is and returns only the timers already due at ``current_ms``.
        """
        _require_int("now_ms", now_ms)
        now_ms = max(now_ms, self._current_ms)
        self._cascade_buckets_due_by(now_ms)
        self._current_ms = now_ms
        return self._pop_near_due_by(now_ms)

    def next_fire_ms(self) -> int | None:
        """The earliest fire time held, or None when the wheel is empty."""
        self._drop_stale_near_top()
        if self._near:
            # Everything in a bucket fires after the current tick, everything in _near within it.
            return self._near[0][0]
        self._drop_empty_buckets_at_heap_top()
        return self._earliest_fire_in_buckets()

    def due_counts(self, until_ms: int, *, levels: int = 2) -> list[tuple[int, int, int]]:
        """How many timers are due, and when, up to ``until_ms``: ``(from_ms, to_ms, count)``
        for each bucket of the finest ``levels`` whose span begins by then (its timers fire in
        ``[from_ms, to_ms)``) and for the timers of the current tick, earliest first. The counts
        are exact, the times as coarse as the buckets (a level-1 bucket spans
        ``tick_ms * wheel_size`` ms): a forecast, for the beat to see a burst coming. Coarser
        buckets are left out: seconds wide, they would count a steady flow as a burst at their
        beginning (the beat re-adds every timer entering its window from its scan, which
        places it in a fine level).

        O(buckets in the heap), never O(timers): the heap holds only buckets with timers.
        """
        counts: list[tuple[int, int, int]] = []
        live_near = [entry[0] for entry in self._near if self._timers.get(entry[2].key)
                     is entry[2]]
        if live_near:
            counts.append((min(live_near), max(live_near) + 1, len(live_near)))
        for expiration_ms, level, slot in self._bucket_heap:
            bucket = self._levels[level][slot]
            if (level < levels and expiration_ms <= until_ms
                    and bucket.expiration_ms == expiration_ms and bucket.timers):
                counts.append((expiration_ms, expiration_ms + self._bucket_ticks_ms[level],
                               len(bucket.timers)))
        counts.sort()
        return counts

    def fire_time_of(self, key: Hashable) -> int | None:
        """``key``'s fire time, or None if the wheel does not hold it."""
        timer = self._timers.get(key)
        return None if timer is None else timer.fire_at_ms

    def __len__(self) -> int:
        return len(self._timers)

    def __contains__(self, key: object) -> bool:
        return key in self._timers

    def __repr__(self) -> str:
        return (
            f"<TimingWheel current_ms={self._current_ms} timers={len(self._timers)} "
            f"tick_ms={self._tick_ms} wheel_size={self._wheel_size} levels={len(self._levels)}>"
        )

    # -- placement --------------------------------------------------------------------------

    def _add_level(self) -> None:
        level = len(self._levels)
        self._levels.append([_Bucket(level, slot) for slot in range(self._wheel_size)])
        self._bucket_ticks_ms.append(self._tick_ms * self._wheel_size**level)

    def _place(self, timer: _Timer) -> None:
        """Put ``timer`` in ``_near`` if it fires within the current tick, else in its bucket."""
        fire_at_ms = timer.fire_at_ms
        current_ms = self._current_ms
        if fire_at_ms < current_ms - current_ms % self._tick_ms + self._tick_ms:
            timer.bucket = None
            heapq.heappush(self._near, (fire_at_ms, next(self._sequence), timer))
            return
        level = 0
        while True:
            if level == len(self._levels):
                self._add_level()
            bucket_ms = self._bucket_ticks_ms[level]
            level_start_ms = current_ms - current_ms % bucket_ms
            if fire_at_ms < level_start_ms + bucket_ms * self._wheel_size:
                self._put_in_bucket(timer, level, fire_at_ms // bucket_ms)
                return
            level += 1

    def _put_in_bucket(self, timer: _Timer, level: int, bucket_index: int) -> None:
        # A level's timers always fall in the wheel_size - 1 buckets after its current one, and
        # every bucket before those was cascaded when the clock passed it, so a slot is never
        # shared by two different spans.
        bucket = self._levels[level][bucket_index % self._wheel_size]
        expiration_ms = bucket_index * self._bucket_ticks_ms[level]
        bucket.add(timer)
        if bucket.expiration_ms != expiration_ms:
            bucket.expiration_ms = expiration_ms
            heapq.heappush(self._bucket_heap, (expiration_ms, level, bucket.slot))

    # -- advancing --------------------------------------------------------------------------

    def _cascade_buckets_due_by(self, now_ms: int) -> None:
        heap = self._bucket_heap
        while heap and heap[0][0] <= now_ms:
            expiration_ms, level, slot = heapq.heappop(heap)
            bucket = self._levels[level][slot]
            if bucket.expiration_ms != expiration_ms:
                continue  # Defensive: a bucket is only rescheduled after its entry was popped.
            # Re-inserting relative to the bucket's own start sends each timer one step finer.
            self._current_ms = max(self._current_ms, expiration_ms)
            self._flush(bucket)

    def _flush(self, bucket: _Bucket) -> None:
        """Re-insert the timers of a bucket that has come due into finer levels or ``_near``."""
        for timer in bucket.take_all():
            self._place(timer)

    def _pop_near_due_by(self, now_ms: int) -> list[tuple[Hashable, int]]:
        due: list[tuple[Hashable, int]] = []
        near = self._near
        timers = self._timers
        while near and near[0][0] <= now_ms:
            fire_at_ms, _, timer = heapq.heappop(near)
            if timers.get(timer.key) is timer:
                del timers[timer.key]
                due.append((timer.key, fire_at_ms))
            else:
                self._near_stale -= 1
        return due

    # -- housekeeping for next_fire_ms() and lazy removal -----------------------------------

    def _drop_stale_near_top(self) -> None:
        near = self._near
        while near and self._timers.get(near[0][2].key) is not near[0][2]:
            heapq.heappop(near)
            self._near_stale -= 1

    def _compact_near_if_crowded(self) -> None:
        stale = self._near_stale
        if stale >= _NEAR_COMPACTION_MIN_STALE and 2 * stale > len(self._near):
            timers = self._timers
            self._near = [entry for entry in self._near if timers.get(entry[2].key) is entry[2]]
            heapq.heapify(self._near)
            self._near_stale = 0

    def _drop_empty_buckets_at_heap_top(self) -> None:
        # Safe without moving the clock: an empty bucket taken out of the schedule is put back
        # by the next add() that lands in it.
        heap = self._bucket_heap
        while heap:
            expiration_ms, level, slot = heap[0]
            bucket = self._levels[level][slot]
            if bucket.expiration_ms == expiration_ms and bucket.timers:
                return
            heapq.heappop(heap)
            if bucket.expiration_ms == expiration_ms:
                bucket.take_all()

    def _earliest_fire_in_buckets(self) -> int | None:
        """Visit buckets by expiration until none can hold anything earlier than found so far.

        A bucket's expiration is a lower bound of what it holds, and a coarse bucket can start
        before the finer levels end, so the first non-empty bucket is not always the answer; the
        walk usually stops after one bucket per level. It reads the heap as a tree, in order,
        without popping it.
        """
        heap = self._bucket_heap
        earliest_ms: int | None = None
        frontier = [(heap[0][0], 0)] if heap else []
        while frontier:
            expiration_ms, index = heapq.heappop(frontier)
            if earliest_ms is not None and expiration_ms >= earliest_ms:
                break
            _, level, slot = heap[index]
            bucket = self._levels[level][slot]
            if bucket.expiration_ms == expiration_ms and bucket.timers:
                candidate_ms = bucket.earliest_fire_ms()
                if earliest_ms is None or candidate_ms < earliest_ms:
                    earliest_ms = candidate_ms
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child][0], child))
        return earliest_ms


def _require_int(name: str, value: object) -> None:
    # A float would silently break the bucket arithmetic (slot indexes must be ints).
    if not isinstance(value, int):
        raise TypeError(f"{name} must be an int number of milliseconds, got {value!r}")
