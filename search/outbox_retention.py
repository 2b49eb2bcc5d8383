"""Retention of the audit outbox in PostgreSQL: which rows are shipped, and deleting them.

A row is in the search engine once the indexer marked it ``shipped_at`` (after the engine
answered for it, :mod:`search.indexer`), so a shipped row can go: the indexer deletes those shipped
more than ``audit_outbox_keep_hours`` ago (its own prune, every minute), and so does the retention
pass (:mod:`scheduler.retention`, ``chrono retention``). An unshipped row is never deleted, and
what depends on a row being shipped (a day of executions dropped from PostgreSQL) asks
:data:`UNSHIPPED_OF_EXECUTIONS` first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from chronocore.expiry import ExpiredRows
from search.audit import AUDIT_TABLE

DELETE_BATCH = 10_000

# Whether any unshipped audit row belongs to an execution of the table (or partition) named
# {executions}: a probe of the partial index of unshipped rows (few in steady state) joined to
# the executions by their id. Formatted with a quoted identifier, never a user's value.
UNSHIPPED_OF_EXECUTIONS = (
    f"SELECT EXISTS (SELECT 1 FROM {AUDIT_TABLE} a JOIN {{executions}} e "  # nosec B608 # constants
    "ON e.execution_id = a.execution_id WHERE a.shipped_at IS NULL)"
)


# Rows shipped before a cutoff, oldest id first (each batch its own short statement, so no long
# lock and no huge transaction).
SHIPPED = ExpiredRows(
    f"SELECT count(*) FROM {AUDIT_TABLE} WHERE shipped_at < %s",  # nosec B608 # constant
    f"WITH gone AS (DELETE FROM {AUDIT_TABLE} WHERE id IN ("  # nosec B608 # constant
    f"SELECT id FROM {AUDIT_TABLE} WHERE shipped_at < %s ORDER BY id LIMIT %s) RETURNING 1) "
    "SELECT count(*) FROM gone",
    DELETE_BATCH,
)


def count_shipped(before: datetime) -> int:
    """How many rows were shipped before ``before`` (what :func:`delete_shipped` would delete)."""
    return SHIPPED.count(before)


def delete_shipped(before: datetime, *, batch: int = DELETE_BATCH,
                   should_stop: Callable[[], bool] = lambda: False) -> int:
    """Delete the rows shipped before ``before``, ``batch`` at a time, until none is left or
    ``should_stop()``; how many."""
    return SHIPPED.run(before, batch=batch, should_stop=should_stop)[0]
