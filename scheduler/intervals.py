"""Interval schedules: every N seconds, minutes, hours or days from an anchor, in elapsed time.

Pure. Celery beat's ``schedule(timedelta(...))`` and django-celery-beat's ``IntervalSchedule``
mean a period of elapsed time, so an interval is counted in UTC epoch milliseconds and no
daylight-saving change stretches or shrinks it (every 2 days fires 48 h apart across both
transitions; its local time of day moves by the hour when the clocks do). Occurrences are
``anchor + k × period`` for k = 0, 1, 2 …: a restart, an edit of another field or another replica
computes the same ones. The anchor is given, or the time the job was made.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import ClassVar

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
UNITS_MS = {"seconds": SECOND_MS, "minutes": MINUTE_MS, "hours": HOUR_MS, "days": DAY_MS}


@dataclass(frozen=True)
class IntervalSchedule:
    """Every ``period_ms`` from ``anchor_ms`` (both whole milliseconds, UTC epoch)."""

    MIN_PERIOD_MS: ClassVar[int] = SECOND_MS
    MAX_PERIOD_MS: ClassVar[int] = 366 * DAY_MS

    period_ms: int
    anchor_ms: int
    timezone: str = "UTC"  # shown in, never evaluated in: elapsed time has no zone

    def __post_init__(self) -> None:
        if problem := period_problem(self.period_ms):
            raise ValueError(problem)

    @property
    def expression(self) -> str:
        return f"every {describe_period(self.period_ms)}"

    @property
    def fixed_time(self) -> bool:
        return False

    def next_fire_ms(self, after_ms: int) -> int:
        """The first occurrence strictly after ``after_ms``."""
        after_ms = operator.index(after_ms)
        if after_ms < self.anchor_ms:
            return self.anchor_ms
        periods = (after_ms - self.anchor_ms) // self.period_ms + 1
        return self.anchor_ms + periods * self.period_ms

    def fire_times_ms(self, after_ms: int, count: int) -> list[int]:
        """The next ``count`` occurrences strictly after ``after_ms``."""
        if count < 0:
            raise ValueError(f"count must be 0 or more, got {count}")
        first = self.next_fire_ms(after_ms)
        return [first + index * self.period_ms for index in range(count)]

    def dst_note(self, fire_ms: int) -> str | None:
        """Always None: elapsed time does not see daylight saving."""
        return None


def period_problem(period_ms: object) -> str | None:
    """What to change in an interval's period (milliseconds); None when it is fine."""
    low, high = IntervalSchedule.MIN_PERIOD_MS, IntervalSchedule.MAX_PERIOD_MS
    if isinstance(period_ms, bool) or not isinstance(period_ms, int):
        return (f"Must be a whole number of milliseconds from {low} (a second) to {high} "
                f"(366 days), got {type(period_ms).__name__}.")
    if not low <= period_ms <= high:
        return (f"Is {period_ms}; use a period from {low} ms (a second) to {high} ms "
                "(366 days).")
    return None


def describe_period(period_ms: int) -> str:
    """``45 minutes``, ``7 seconds``, ``2 days``, ``1500 ms``: the largest unit that divides it."""
    for unit in ("days", "hours", "minutes", "seconds"):
        size = UNITS_MS[unit]
        if period_ms % size == 0:
            count = period_ms // size
            return f"{count} {unit[:-1] if count == 1 else unit}"
    return f"{period_ms} ms"
