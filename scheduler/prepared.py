"""The hot path's statements, run as prepared statements with server-side parameter binding.

Django's PostgreSQL backend binds parameters on the client: every statement reaches PostgreSQL as
new text (arrays spelled out as literals), which it parses and plans again. The statements that
run once or twice per job (the beat's insert and record, a worker's start and finish) are long
CTEs whose planning costs more than the rows they write; prepared once per connection, PostgreSQL
reuses their plan. Their arrays go as one text literal each (:func:`array`, cast in the statement):
psycopg's binary list dumper costs ~2 µs an element in Python, six times the literal's, and the
hot statements carry a dozen arrays of a batch's rows.

Django connects psycopg with ``prepare_threshold=None``, which turns every ``prepare=True`` into
a no-op: :func:`cursor` sets the threshold of the connection it uses to a number no statement
reaches, so the statements run here are prepared (``prepare=True``) and nothing else is (Django's
own cursors bind on the client and never prepare). ``tests/integration/test_prepared.py`` reads
them back from ``pg_prepared_statements``.

Only a statement of at most :data:`GENERIC_PLAN_MAX_ROWS` rows is prepared. After five runs of
a prepared statement PostgreSQL may switch it to a generic plan, made without the arrays'
lengths: for a beat's batch of 500 rows that plan's cost grew with the square of the rows, and
PostgreSQL's CPU per job at the dispatch ceiling went from 0.10 to 0.39-2.09 ms. A larger
statement is bound on the server but planned for its own arrays each time, and that planning
is small beside its rows.

Errors come out as Django's (``django.db.DatabaseError`` and its subclasses), as from
``connection.cursor()``.

An :class:`OwnConnection` made with ``generic_plans`` has its prepared statements planned
once, generically (:data:`GENERIC_PLANS`): a worker runs its batches of 2 to
:data:`GENERIC_PLAN_MAX_ROWS` rows there, which PostgreSQL would otherwise plan on every call.

A statement that many threads take turns to run (a worker's group commit: whichever thread leads
a batch runs it) runs on an :class:`OwnConnection` rather than the leading thread's: a worker
then holds one connection per kind of statement, prepared once, instead of one per thread that
ever led a batch, each opened (a SCRAM exchange and a new backend) and prepared while jobs wait.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper


def array(values: Iterable[object]) -> str:
    """A PostgreSQL array literal of ``values`` (None is NULL, a datetime its ISO form,
    anything else its ``str``), for a parameter the statement casts (``%s::uuid[]``)."""
    return "{" + ",".join(map(_element, values)) + "}"


def ms_array(values: Iterable[int | None]) -> str:
    """A PostgreSQL array literal of epoch-millisecond integers (None is NULL), for a
    ``%s::bigint[]`` parameter turned into times in the statement (:data:`MS_TIME`): an
    integer costs a fraction of a datetime built and written in ISO form, here and in
    PostgreSQL's parser."""
    return "{" + ",".join(["NULL" if ms is None else str(ms) for ms in values]) + "}"


# The timestamptz of an epoch-millisecond bigint (``{}``: the expression), exactly: whole
# seconds and the milliseconds left added apart, each product of an interval and a number
# exact in float8 (one product of the whole milliseconds is not, past the year 2255).
MS_TIME = ("(timestamptz 'epoch' + ({0} / 1000) * interval '1 second' "
           "+ mod({0}, 1000) * interval '1 millisecond')")


def _element(value: object) -> str:
    if value is None:
        return "NULL"
    # The types of most elements (ids, counts, times), written bare: nothing in them needs
    # quoting or escaping (a uuid 1.07 -> 0.73 µs, an int 0.21 -> 0.12 µs, a datetime 1.33 ->
    # 1.02 µs; bench/RESULTS.md, session 18). A uuid keeps its hyphens: the same literal may
    # fill a text[] parameter.
    kind = type(value)
    if kind is uuid.UUID or kind is int:
        return str(value)
    if kind is datetime:
        return value.isoformat()  # type: ignore[attr-defined]  # digits and -:.+T
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    # Every element quoted: inside quotes only a backslash and a double quote are special.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class OwnConnection:
    """A database connection of its own, which threads take turns to use: one statement at a
    time (the caller serialises them, as a :class:`~scheduler.batching.Coalescer` does). It
    connects when first used, is recycled like Django's (``CONN_MAX_AGE``, or after an error
    that left it unusable), and a forked child starts without its parent's."""

    def __init__(self, alias: str = DEFAULT_DB_ALIAS, *, generic_plans: bool = False) -> None:
        self.alias = alias
        # Its prepared statements run on generic plans (:data:`GENERIC_PLANS`).
        self.generic_plans = generic_plans
        self._wrapper: BaseDatabaseWrapper | None = None
        self._set_up: object = None  # the psycopg connection its session settings were made on
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # The parent's socket is not the child's to close: drop it unclosed.
        self._wrapper = None
        self._set_up = None

    def wrapper(self) -> BaseDatabaseWrapper:
        if self._wrapper is None:
            wrapper = connections.create_connection(self.alias)
            wrapper.inc_thread_sharing()
            self._wrapper = wrapper
        self._wrapper.close_if_unusable_or_obsolete()
        return self._wrapper

    def connect(self) -> None:
        """Open it now (a worker does before its first job) rather than on first use."""
        self.wrapper().ensure_connection()
        self._set_up_session()

    def _set_up_session(self) -> None:
        """Make this connection's session settings, once per server connection (again after
        it was recycled)."""
        raw = self._wrapper.connection if self._wrapper is not None else None
        if raw is None or raw is self._set_up:
            return
        if self.generic_plans:
            with self._wrapper.wrap_database_errors:  # type: ignore[union-attr]
                raw.execute(GENERIC_PLANS)
        self._set_up = raw

    def close(self) -> None:
        if self._wrapper is not None:
            self._wrapper.close()


# psycopg prepares a statement run with ``prepare=True``, or run this many times (which none is).
_ONLY_WHEN_ASKED = 2**62


# The most rows (elements of a statement's arrays) a prepared statement is run for: see the
# module's docstring. The single-row statements of a worker's start and finish (one or two per
# job) are well under it, and so are the small batches of a lightly loaded worker.
GENERIC_PLAN_MAX_ROWS = 16

# The session setting of an :class:`OwnConnection` made with ``generic_plans``: its prepared
# statements are planned once, without their parameters' values. PostgreSQL's default (``auto``)
# keeps planning a batched ``UPDATE`` of the partitioned executions table anew on every call (a
# generic plan of it, made without partition pruning, is costed above a custom one), and a
# worker's start and finish of 2-16 rows cost ~0.5 ms of planning a call. A statement of one row
# stays on a connection without it: its custom plan (one day's partition) is cheaper than a
# generic plan that opens every partition at run time (bench/RESULTS.md, session 23).
GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"


@contextmanager
def cursor(on: OwnConnection | None = None) -> Iterator[PreparedCursor]:
    """A cursor whose statements are prepared: on Django's connection of this thread (in its
    transaction), or ``on`` a connection of its own."""
    wrapper = connection if on is None else on.wrapper()
    wrapper.ensure_connection()
    if on is not None:
        on._set_up_session()
    raw_connection = wrapper.connection
    if raw_connection.prepare_threshold is None:
        raw_connection.prepare_threshold = _ONLY_WHEN_ASKED
    with wrapper.wrap_database_errors, psycopg.Cursor(raw_connection) as raw:
        yield PreparedCursor(raw)


class PreparedCursor:
    """``execute``/``fetchall``/``rowcount`` over a psycopg cursor, its statements bound on the
    server and those of a few rows prepared (psycopg keeps the prepared statements of a
    connection, keyed by their text). Only :func:`cursor` makes one, inside the block that turns
    errors into Django's."""

    def __init__(self, raw: psycopg.Cursor) -> None:
        self._raw = raw

    def execute(self, sql: str, params: Sequence[object] | Mapping[str, object], *,
                rows: int) -> None:
        """Run ``sql`` for ``rows`` rows (the length of its arrays, 1 for a statement of
        scalars), prepared if they are at most :data:`GENERIC_PLAN_MAX_ROWS`."""
        self._raw.execute(sql, params, prepare=rows <= GENERIC_PLAN_MAX_ROWS)

    def fetchall(self) -> list[tuple]:
        return self._raw.fetchall()

    @property
    def rowcount(self) -> int:
        return self._raw.rowcount
