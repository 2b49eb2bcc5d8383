"""Time as Chrono keeps it: UTC epoch milliseconds, converted only at the edges."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_ms() -> int:
    """Wall-clock now in epoch ms (what fire times are compared with)."""
    return time.time_ns() // 1_000_000


def ms_to_datetime(ms: int) -> datetime:
    """An aware UTC datetime for epoch ``ms``; exact (no float rounding)."""
    return EPOCH + timedelta(milliseconds=ms)


def datetime_to_ms(value: datetime) -> int:
    """Epoch ms of an aware datetime, truncated to the millisecond."""
    if value.tzinfo is None:
        raise ValueError("naive datetime: Chrono only takes aware datetimes")
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000 + delta.microseconds // 1_000
