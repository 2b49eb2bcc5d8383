"""Array literals for the hot statements' parameters: every value comes back as it went in."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.prepared import array


def test_values_are_quoted_and_escaped_and_none_is_null():
    assert array([]) == "{}"
    assert array([None, 1, "a"]) == '{NULL,"1","a"}'
    assert array(['say "hi"', "back\\slash", "NULL", "{,}"]) == (
        '{"say \\"hi\\"","back\\\\slash","NULL","{,}"}')
    assert array([datetime(2026, 3, 29, 1, 30, tzinfo=UTC)]) == '{"2026-03-29T01:30:00+00:00"}'
