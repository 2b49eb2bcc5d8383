"""The hot path's statements, run as prepared statements with server-side parameter binding.

Django's PostgreSQL backend binds parameters on the client: every statement reaches PostgreSQL as
new text (arrays spelled out as literals), which it parses and plans again. The statements that
run once or twice per job (the beat's insert and record, a worker's start and finish) are long
CTEs whose planning costs more than the rows they write; prepared once per connection, PostgreSQL
reuses their plan and receives the arrays in binary.

Errors come out as Django's (``django.db.DatabaseError`` and its subclasses), as from
``connection.cursor()``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import psycopg
from django.db import connection


@contextmanager
def cursor() -> Iterator[PreparedCursor]:
    """A cursor on Django's connection (same transaction) whose statements are prepared."""
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as raw:
        yield PreparedCursor(raw)


class PreparedCursor:
    """``execute``/``fetchall``/``rowcount`` over a psycopg cursor, every statement prepared
    (psycopg keeps the prepared statements of a connection, keyed by their text). Only
    :func:`cursor` makes one, inside the block that turns errors into Django's."""

    def __init__(self, raw: psycopg.Cursor) -> None:
        self._raw = raw

    def execute(self, sql: str, params: Sequence[object] | Mapping[str, object]) -> None:
        self._raw.execute(sql, params, prepare=True)

    def fetchall(self) -> list[tuple]:
        return self._raw.fetchall()

    @property
    def rowcount(self) -> int:
        return self._raw.rowcount
