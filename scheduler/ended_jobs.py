"""Retention of jobs that ended: deleting COMPLETED and CANCELLED jobs once their history is gone.

A one-time job stays COMPLETED after it ran, a cancelled job CANCELLED, and neither ever changes
again (:class:`scheduler.errors.JobEnded`). Kept for ever, they made ``chrono_job`` grow by every
one-time job and workflow step: at the brief's 100 M jobs a day, by that many rows a day. The
retention pass (:mod:`scheduler.retention`) deletes a job that ended before its cutoff (the
start of the UTC day ``execution_retention_days`` ago) and has no execution left. Its
executions go first, with their day's partition (kept while one of them is unfinished, its audit
rows unshipped or its workflow end unapplied), so a job is never deleted under an execution that
still runs, retries or waits to be applied, and its history in PostgreSQL ends at one time.

Its ``chrono_job_watch`` row goes with it. Its audit events stay in the search engine for their
own retention. Its idempotency key is free again once it is deleted (docs/operations.md,
"Retention"). The jobs-by-status counts follow by the table's delete trigger
(:mod:`scheduler.job_counts`).

``job_ended_idx`` (``updated_at`` of ended jobs; an ended job's last update is its end) finds
them oldest first, in batches of :data:`DELETE_BATCH`, each its own short statement; rows locked
by another transaction are skipped and taken at the next pass.
"""

from __future__ import annotations

from chronocore.expiry import ExpiredRows
from scheduler.models import JobStatus

DELETE_BATCH = 10_000
ENDED = (JobStatus.COMPLETED, JobStatus.CANCELLED)
# Written out, as job_ended_idx's predicate is: the planner proves the partial index's
# condition from constants.
_ENDED_SQL = ", ".join(f"'{status}'" for status in ENDED)

# An ended job older than the cutoff with no execution in any partition (the parent table's
# job index probes each partition's; the expired days are gone, so few are left to probe).
_EXPIRED = (
    "SELECT j.job_id FROM chrono_job j "  # nosec B608 # the statuses are module constants
    f"WHERE j.status IN ({_ENDED_SQL}) AND j.updated_at < %s "
    "AND NOT EXISTS (SELECT 1 FROM chrono_execution e WHERE e.job_id = j.job_id)"
)
_COUNT_SQL = f"SELECT count(*) FROM ({_EXPIRED}) x"  # nosec B608 # constants
_DELETE_SQL = (
    f"WITH doomed AS ({_EXPIRED} ORDER BY j.updated_at LIMIT %s "  # nosec B608 # constants
    "  FOR UPDATE OF j SKIP LOCKED), "
    "jobs AS (DELETE FROM chrono_job j USING doomed d WHERE j.job_id = d.job_id "
    "  RETURNING j.job_id), "
    "watches AS (DELETE FROM chrono_job_watch w USING jobs g WHERE w.job_id = g.job_id) "
    "SELECT count(*) FROM jobs"
)


# The jobs that ended before a cutoff with no execution left.
EXPIRED = ExpiredRows(_COUNT_SQL, _DELETE_SQL, DELETE_BATCH)
count_expired = EXPIRED.count
delete_expired = EXPIRED.delete
