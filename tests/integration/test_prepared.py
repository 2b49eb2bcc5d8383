"""The hot path's statements are prepared on the server, and only they are: those of a few rows
(a batch of many is planned for its own arrays, never by a generic plan); and the array
literals of their parameters come back from PostgreSQL as they went in."""

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection

from scheduler import prepared

pytestmark = pytest.mark.django_db(transaction=True)

_PROBE = "SELECT %s::int + 1 AS prepared_probe"
_BATCH = "SELECT count(*) AS batch_probe_{} FROM unnest(%s::int[])"


def _server_statements(cursor) -> list[str]:
    cursor.execute("SELECT statement FROM pg_prepared_statements")
    return [row[0] for row in cursor.fetchall()]


def test_a_statement_run_on_this_threads_connection_is_prepared_once():
    with prepared.cursor() as cursor:
        for value in (1, 2, 3):
            cursor.execute(_PROBE, [value], rows=1)
            assert cursor.fetchall() == [(value + 1,)]
    with connection.cursor() as django_cursor:
        statements = _server_statements(django_cursor)
    assert [s for s in statements if "prepared_probe" in s] == [
        "SELECT $1::int + 1 AS prepared_probe"]


def test_a_statement_run_on_a_connection_of_its_own_is_prepared_there():
    own = prepared.OwnConnection()
    try:
        with prepared.cursor(on=own) as cursor:
            cursor.execute(_PROBE, [41], rows=1)
            assert cursor.fetchall() == [(42,)]
            cursor.execute("SELECT statement FROM pg_prepared_statements", [], rows=1)
            assert any("prepared_probe" in row[0] for row in cursor.fetchall())
    finally:
        own.close()


def test_djangos_own_queries_are_not_prepared():
    with prepared.cursor() as cursor:
        cursor.execute(_PROBE, [1], rows=1)
    with connection.cursor() as django_cursor:
        for _ in range(10):
            django_cursor.execute("SELECT 7 AS django_probe")
        statements = _server_statements(django_cursor)
    assert not [s for s in statements if "django_probe" in s]


def test_a_statement_of_more_rows_than_the_bound_is_bound_on_the_server_but_not_prepared():
    most = prepared.GENERIC_PLAN_MAX_ROWS
    with prepared.cursor() as cursor:
        for name, size in (("small", most), ("large", most + 1)):
            values = list(range(size))
            for _ in range(8):  # past the five runs after which a generic plan may be chosen
                cursor.execute(_BATCH.format(name), [prepared.array(values)], rows=size)
                assert cursor.fetchall() == [(size,)]
    with connection.cursor() as django_cursor:
        statements = _server_statements(django_cursor)
    assert [s for s in statements if "batch_probe" in s] == [
        "SELECT count(*) AS batch_probe_small FROM unnest($1::int[])"]


def test_every_kind_of_array_element_comes_back_from_postgresql_as_it_went_in():
    ids = [uuid.uuid4(), None, uuid.UUID(int=0)]
    counts = [0, None, -7, 2**40]
    times = [datetime(2026, 3, 29, 1, 30, tzinfo=UTC), None,
             datetime(2026, 10, 25, 1, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5)))]
    texts = ['say "hi"', None, "back\\slash", "NULL", "{,}", " spaced ", ""]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::uuid[], %s::bigint[], %s::timestamptz[], %s::text[]",
                       [prepared.array(ids), prepared.array(counts), prepared.array(times),
                        prepared.array(texts)])
        assert cursor.fetchone() == (ids, counts, times, texts)
