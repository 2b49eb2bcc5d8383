"""Rows of things that ended, counted and deleted in batches: what the retention pass
(:mod:`scheduler.retention`) runs for each kind of them, and the indexer's prune of shipped audit
outbox rows (:mod:`search.outbox_retention`). Here, at the bottom, so that every layer's kind is
one of these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection


@dataclass(frozen=True)
class ExpiredRows:
    """Rows of things that ended, counted by ``count_sql`` and deleted by ``delete_sql`` (each
    with the cutoff as its parameter; the deletion's last parameter is its batch, and it
    selects how many it deleted)."""

    count_sql: str
    delete_sql: str
    batch: int

    @classmethod
    def older_than(cls, table: str, column: str, *, batch: int) -> ExpiredRows:
        """The rows of ``table`` whose ``column`` (a time, indexed) is before the cutoff,
        oldest first, by their ``id``; ``table`` and ``column`` are module constants."""
        expired = f"SELECT id FROM {table} WHERE {column} < %s"  # nosec B608 # constants
        return cls(
            f"SELECT count(*) FROM ({expired}) x",  # nosec B608 # constants
            f"WITH doomed AS ({expired} ORDER BY {column} LIMIT %s), "  # nosec B608 # constants
            f"gone AS (DELETE FROM {table} r USING doomed d WHERE r.id = d.id RETURNING r.id) "
            "SELECT count(*) FROM gone",
            batch,
        )

    def count(self, before: datetime) -> int:
        """How many :meth:`delete` would delete (a dry run)."""
        with connection.cursor() as cursor:
            cursor.execute(self.count_sql, [before])
            return int(cursor.fetchone()[0])

    def run(self, before: datetime, *, dry_run: bool = False, batch: int | None = None,
            should_stop: Callable[[], bool] = lambda: False) -> tuple[int, bool]:
        """A pass over them: on a dry run how many :meth:`delete` would delete; otherwise
        nothing when ``should_stop()`` already (reported as maybe some left), else
        :meth:`delete`. (How many, whether some may be left.)"""
        if dry_run:
            return self.count(before), False
        if should_stop():
            return 0, True
        return self.delete(before, batch=batch, should_stop=should_stop)

    def delete(self, before: datetime, *, batch: int | None = None,
               should_stop: Callable[[], bool] = lambda: False) -> tuple[int, bool]:
        """Delete them, a batch a statement (short, so no long lock and no huge
        transaction), until none is left or ``should_stop()``; (how many, whether some may
        be left)."""
        size = batch or self.batch
        total = 0
        while True:
            with connection.cursor() as cursor:
                cursor.execute(self.delete_sql, [before, size])
                deleted = int(cursor.fetchone()[0])
            total += deleted
            if deleted < size:
                return total, False
            if should_stop():
                return total, True
