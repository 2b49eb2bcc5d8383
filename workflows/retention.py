"""Retention of workflow runs: deleting those that finished before the retention pass's cutoff.

A run that finished (SUCCEEDED, FAILED, CANCELLED, TIMED_OUT) keeps its row (its state, input
and results) and one ``chrono_workflow_task`` row per step attempt and map instance: kept for
ever, a 10,000-way fan-out left 10,000 rows a run. The retention pass
(:mod:`scheduler.retention`, step 5) sends :data:`scheduler.retention.retention_pass`; this
module's receiver deletes the runs that finished before its cutoff, with their task rows, unless

* a child run (a sub-workflow step's) has not finished: an abandoned child that ends later
  writes its end under its parent's step, which the engine applies through the parent's task
  rows; or
* an execution of one of its steps is still in PostgreSQL (in a day the pass kept: unfinished,
  its audit rows unshipped or its end unapplied).

Their step jobs, ended once dispatched, are deleted by the jobs' own step
(:mod:`scheduler.ended_jobs`) under the same conditions. A run retried from failure is running
again (its ``finished_at`` cleared) and is not touched. The run's audit events stay in the search
engine; its idempotency key is free again once it is deleted.

Oldest first through ``workflow_run_finished_idx``, :data:`DELETE_BATCH` runs a statement (a
run's task rows go with it in the same statement), runs locked by the engine skipped until the
next pass.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.dispatch import receiver

from chronocore.expiry import ExpiredRows
from scheduler.retention import Deleted, RetentionReport, retention_pass
from workflows.states import TERMINAL_RUN_STATUSES

WHAT = "finished workflow runs"
DELETE_BATCH = 500
_FINISHED_SQL = ", ".join(f"'{status}'" for status in sorted(TERMINAL_RUN_STATUSES))

_EXPIRED = (
    "SELECT r.run_id FROM chrono_workflow_run r "  # nosec B608 # the statuses are module constants
    f"WHERE r.finished_at < %s AND r.status IN ({_FINISHED_SQL}) "
    "AND NOT EXISTS (SELECT 1 FROM chrono_workflow_run c "
    "  WHERE c.parent_run_id = r.run_id AND c.finished_at IS NULL) "
    "AND NOT EXISTS (SELECT 1 FROM chrono_workflow_task t "
    "  JOIN chrono_execution e ON e.job_id = t.job_id WHERE t.run_id = r.run_id)"
)
_COUNT_SQL = f"SELECT count(*) FROM ({_EXPIRED}) x"  # nosec B608 # constants
_DELETE_SQL = (
    f"WITH doomed AS ({_EXPIRED} ORDER BY r.finished_at LIMIT %s "  # nosec B608 # constants
    "  FOR UPDATE OF r SKIP LOCKED), "
    "tasks AS (DELETE FROM chrono_workflow_task t USING doomed d WHERE t.run_id = d.run_id), "
    "runs AS (DELETE FROM chrono_workflow_run r USING doomed d WHERE r.run_id = d.run_id "
    "  RETURNING r.run_id) "
    "SELECT count(*) FROM runs"
)


# The runs that finished before a cutoff and may go.
EXPIRED = ExpiredRows(_COUNT_SQL, _DELETE_SQL, DELETE_BATCH)
count_expired = EXPIRED.count
delete_expired = EXPIRED.delete


@receiver(retention_pass, sender=RetentionReport, dispatch_uid="workflows.retention")
def _on_retention_pass(*, before: datetime, dry_run: bool, should_stop: Callable[[], bool],
                       **_: object) -> Deleted:
    return Deleted(WHAT, *EXPIRED.run(before, dry_run=dry_run, should_stop=should_stop))
