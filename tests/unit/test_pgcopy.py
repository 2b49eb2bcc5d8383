"""COPY text of values: escaping and timestamps, as PostgreSQL reads them."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronocore.pgcopy import NULL, TimestampText, copy_text, escape
from scheduler.clock import ms_to_datetime


@pytest.mark.parametrize("ms", [0, 1, 999, 1_000, -1, -1_001, 1_796_000_000_123,
                                1_796_000_000_999, 253_402_300_799_999])
def test_timestamp_text_is_the_same_instant_to_the_millisecond(ms):
    text = TimestampText()
    assert datetime.fromisoformat(text(ms)) == ms_to_datetime(ms)
    assert text(ms) == text(ms)  # from its cache the second time


def test_a_second_shared_by_many_fire_times_keeps_each_millisecond():
    text = TimestampText()
    base = 1_796_000_000_000
    assert [text(base + i) for i in (0, 7, 999)] == [
        "2026-11-30 00:53:20.000+00", "2026-11-30 00:53:20.007+00", "2026-11-30 00:53:20.999+00"]


def test_escape_writes_out_what_copy_treats_specially():
    assert escape("a\\b\tc\nd\re") == "a\\\\b\\tc\\nd\\re"
    assert escape("plain é") == "plain é"
    assert copy_text(None) == NULL
    assert copy_text(3) == "3"
