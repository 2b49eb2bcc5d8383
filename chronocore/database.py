"""Telling a lost PostgreSQL connection from a refused statement.

Every long-running loop (beat, worker recording, reaper, indexer, workflow engine) catches
Django's ``DatabaseError``; after a PostgreSQL failover (the primary gone, a standby promoted, a
multi-host ``DATABASE_URL`` with ``target_session_attrs=read-write``) what it catches is a
connection that broke, and then connections refused until the new primary accepts writes. Such
an error says nothing about the statement: the same work, tried again on a new connection once
the server answers, succeeds. A refused statement (a deadlock victim, a constraint) is another
matter, which each loop already handles its own way.
"""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

# SQLSTATE classes of a server going away: 08 connection exception, 57P admin/crash shutdown
# and "cannot connect now" (a server starting, or in recovery).
_LOST_SQLSTATE_PREFIXES = ("08", "57P")


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (one of Django's database errors) is PostgreSQL unreachable rather than
    a statement refused: a broken or refused connection, a server shutting down or starting.

    Only errors that psycopg raised count (Django wraps them, keeping psycopg's as the
    cause): psycopg's errors of a lost connection carry no SQLSTATE or one of the classes above,
    while a deadlock victim (40P01), also an ``OperationalError``, is a refused statement."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    cause = exc.__cause__
    if cause is None or type(cause).__module__.split(".")[0] != "psycopg":
        return False
    sqlstate = getattr(cause, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(_LOST_SQLSTATE_PREFIXES)
