"""Array literals for the hot statements' parameters: every value comes back as it went in
(through PostgreSQL: tests/integration/test_prepared.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

from scheduler.prepared import array


def test_values_are_quoted_and_escaped_and_none_is_null():
    assert array([]) == "{}"
    assert array([None, "1", "a"]) == '{NULL,"1","a"}'
    assert array(['say "hi"', "back\\slash", "NULL", "{,}"]) == (
        '{"say \\"hi\\"","back\\\\slash","NULL","{,}"}')


def test_ids_counts_and_times_are_written_bare():
    an_id = uuid.UUID("0b7e2f4c-1d2a-4c6e-9f00-1234567890ab")
    assert array([an_id, None]) == "{0b7e2f4c-1d2a-4c6e-9f00-1234567890ab,NULL}"
    assert array([0, -7, 2**40]) == "{0,-7,1099511627776}"
    assert array([datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
                  datetime(2026, 3, 29, 1, 30, 0, 123456,
                           tzinfo=timezone(timedelta(hours=-5)))]) == (
        "{2026-03-29T01:30:00+00:00,2026-03-29T01:30:00.123456-05:00}")


def test_other_types_take_the_quoted_path():
    # bool is an int, a subclass of UUID or datetime is not the class: each its str, quoted.
    class Stamp(datetime):
        pass

    assert array([True, Stamp(2026, 1, 2, tzinfo=UTC)]) == (
        '{"True","2026-01-02T00:00:00+00:00"}')
