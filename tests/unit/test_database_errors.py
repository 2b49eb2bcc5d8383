"""Which database errors mean "PostgreSQL unreachable" (a failover under way) and which a
statement refused: the loops retry the first kind until the server answers again."""

from __future__ import annotations

import psycopg
import pytest
from django.db import DataError, InterfaceError, OperationalError

from chronocore.database import connection_lost


def wrapped(django_error, cause):
    """A Django error as Django's wrapper raises it: psycopg's error as its cause."""
    try:
        raise django_error(str(cause)) from cause
    except django_error as exc:
        return exc


def with_sqlstate(sqlstate):
    return psycopg.errors.lookup(sqlstate)("as the server said")


@pytest.mark.parametrize("cause", [
    psycopg.OperationalError("consuming input failed: server closed the connection"),
    psycopg.OperationalError("connection failed: session is read-only"),
    with_sqlstate("57P01"),  # terminating connection due to administrator command
    with_sqlstate("57P02"),  # crash shutdown
    with_sqlstate("57P03"),  # cannot connect now
    with_sqlstate("08006"),  # connection failure
], ids=lambda cause: getattr(cause, "sqlstate", None) or str(cause)[:20])
def test_a_broken_or_refused_connection_is_lost(cause):
    assert connection_lost(wrapped(OperationalError, cause))


def test_an_interface_error_of_a_closed_connection_is_lost():
    assert connection_lost(wrapped(InterfaceError, psycopg.InterfaceError("connection closed")))


def test_a_deadlock_victim_or_a_bad_value_is_a_refused_statement_not_a_lost_connection():
    assert not connection_lost(wrapped(OperationalError, with_sqlstate("40P01")))
    assert not connection_lost(wrapped(DataError, with_sqlstate("22P02")))


def test_an_error_psycopg_did_not_raise_is_not_taken_for_a_lost_connection():
    assert not connection_lost(OperationalError("deadlock detected"))
    assert not connection_lost(ValueError("no database at all"))
