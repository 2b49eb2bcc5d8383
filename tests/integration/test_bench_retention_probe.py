"""The writer probe of ``chrono bench retention`` measures how long a statement on
``chrono_execution`` waits behind a lock another connection holds on the table."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from bench.retention import writer_probe

pytestmark = pytest.mark.django_db(transaction=True)


def hold_exclusive_lock(seconds: float, locked: threading.Event) -> None:
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("LOCK TABLE chrono_execution IN ACCESS EXCLUSIVE MODE")
            locked.set()
            time.sleep(seconds)
            cursor.execute("ROLLBACK")
    finally:
        other.close()


def test_the_probe_waits_as_long_as_the_lock_is_held_and_not_otherwise():
    quiet: list[float] = []
    with writer_probe(quiet):
        time.sleep(0.2)
    assert len(quiet) == 1 and quiet[0] < 150

    waits: list[float] = []
    locked = threading.Event()
    with writer_probe(waits):
        holder = threading.Thread(target=hold_exclusive_lock, args=(0.5, locked))
        holder.start()
        assert locked.wait(10)
        holder.join(10)
    assert waits and 300 <= waits[0] < 5_000
