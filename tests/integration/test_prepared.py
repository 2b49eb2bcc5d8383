"""The hot path's statements are prepared on the server, and only they are."""

import pytest
from django.db import connection

from scheduler import prepared

pytestmark = pytest.mark.django_db(transaction=True)

_PROBE = "SELECT %s::int + 1 AS prepared_probe"


def _server_statements(cursor) -> list[str]:
    cursor.execute("SELECT statement FROM pg_prepared_statements")
    return [row[0] for row in cursor.fetchall()]


def test_a_statement_run_on_this_threads_connection_is_prepared_once():
    with prepared.cursor() as cursor:
        for value in (1, 2, 3):
            cursor.execute(_PROBE, [value])
            assert cursor.fetchall() == [(value + 1,)]
    with connection.cursor() as django_cursor:
        statements = _server_statements(django_cursor)
    assert [s for s in statements if "prepared_probe" in s] == [
        "SELECT $1::int + 1 AS prepared_probe"]


def test_a_statement_run_on_a_connection_of_its_own_is_prepared_there():
    own = prepared.OwnConnection()
    try:
        with prepared.cursor(on=own) as cursor:
            cursor.execute(_PROBE, [41])
            assert cursor.fetchall() == [(42,)]
            cursor.execute("SELECT statement FROM pg_prepared_statements", [])
            assert any("prepared_probe" in row[0] for row in cursor.fetchall())
    finally:
        own.close()


def test_djangos_own_queries_are_not_prepared():
    with prepared.cursor() as cursor:
        cursor.execute(_PROBE, [1])
    with connection.cursor() as django_cursor:
        for _ in range(10):
            django_cursor.execute("SELECT 7 AS django_probe")
        statements = _server_statements(django_cursor)
    assert not [s for s in statements if "django_probe" in s]
