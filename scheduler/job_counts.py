"""How many jobs each tenant has in each status, without counting the jobs table.

``SELECT status, count(*) FROM chrono_job`` reads every job: at millions of jobs (one-time jobs
stay, COMPLETED, after they ran) each dashboard refresh would scan the table, which is what
pinned Oban Web's users' databases at 5 M rows. So the counts are kept as the jobs change:

* **Triggers** on ``chrono_job`` (``scheduler/migrations/0012_job_counts.py``), one per
  statement with its transition tables, append the statement's net change per tenant and
  status to ``chrono_job_count`` (:class:`scheduler.models.JobCount`), and the same under
  :data:`scheduler.rollups.ALL_TENANTS`. A trigger, not application code, because jobs change
  in many places (the Python and REST APIs, bulk COPY, the beat's recorder completing one-time
  jobs, the workflow engine's step jobs, a tenant's deletion) and every future path is
  counted too. A statement trigger, not a row trigger, so a COPY of 10,000 jobs appends two
  rows, not 20,000; an update that changes no status (a cron job moving to its next run, the
  beat's most frequent update) appends nothing.
* **Appends, never updates**: an upsert of one counter row per tenant and status would make
  every transaction that touches a tenant's ACTIVE jobs wait for the last one to commit, and
  two transactions touching two statuses in opposite orders deadlock. Inserts of new rows wait
  for nobody.
* **Correct under concurrency**: the appended rows commit or roll back with the statement's
  transaction, so a reader's snapshot sums to exactly the jobs that snapshot sees.
* **Folded** by the reaper (:func:`fold`, every :data:`FOLD_INTERVAL_MS`): for each tenant and
  status appended to since, one statement deletes its rows and inserts their sum, so a tenant
  has about one row per status plus the appends of the last seconds. Folds take a transaction
  advisory lock (two reapers never fold at once: their deletes could deadlock); writers are
  never blocked by it.

Reading (:func:`jobs_by_status`) sums one tenant's rows through ``job_count_tenant_idx``.
``chrono rebuild-job-counts`` (:func:`rebuild`) counts the table again, holding writers back
meanwhile: for a database whose triggers were disabled, never needed otherwise.
"""

from __future__ import annotations

from django.db import connection, transaction

from scheduler.rollups import ALL_TENANTS

FOLD_INTERVAL_MS = 5_000
FOLD_KEYS_PER_STATEMENT = 1_000
# pg_try_advisory_xact_lock key of the fold (any constant unlikely to be used elsewhere).
FOLD_LOCK_KEY = 0x63_68_72_6F_6E_6F_6A_63  # "chronojc"

_READ_SQL = (
    "SELECT status, sum(jobs) FROM chrono_job_count WHERE tenant_id = %s "
    "GROUP BY status HAVING sum(jobs) <> 0"
)
_FOLD_SQL = """
WITH changed AS (
  SELECT DISTINCT tenant_id, status FROM chrono_job_count WHERE NOT folded LIMIT %s
), gone AS (
  DELETE FROM chrono_job_count c USING changed
  WHERE c.tenant_id = changed.tenant_id AND c.status = changed.status
  RETURNING c.tenant_id, c.status, c.jobs
)
INSERT INTO chrono_job_count (tenant_id, status, jobs, folded)
SELECT tenant_id, status, sum(jobs), true FROM gone GROUP BY tenant_id, status
HAVING sum(jobs) <> 0
"""
_REBUILD_SQL = """
INSERT INTO chrono_job_count (tenant_id, status, jobs, folded)
SELECT coalesce(tenant_id, %s::uuid), status, count(*), true FROM chrono_job
GROUP BY GROUPING SETS ((tenant_id, status), (status))
"""


def jobs_by_status(tenant_id: str | None) -> dict[str, int]:
    """``{status: jobs}`` of one tenant, or of every tenant (None); statuses with no job are
    left out."""
    sql, parameters = jobs_by_status_query(tenant_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, parameters)
        return jobs_by_status_from(cursor.fetchall())


def jobs_by_status_query(tenant_id: str | None) -> tuple[str, list[object]]:
    """The statement :func:`jobs_by_status` runs, for a caller that sends it with others in
    one round trip (the dashboard); :func:`jobs_by_status_from` reads its rows."""
    return _READ_SQL, [tenant_id or ALL_TENANTS]


def jobs_by_status_from(rows: list[tuple]) -> dict[str, int]:
    return {status: int(jobs) for status, jobs in rows}


def fold(*, keys: int = FOLD_KEYS_PER_STATEMENT) -> int | None:
    """Sum the rows of up to ``keys`` (tenant, status) pairs appended to since the last fold
    into one row each. Returns how many rows it wrote, or None when another fold was running."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [FOLD_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(_FOLD_SQL, [keys])
        return cursor.rowcount


def rebuild() -> int:
    """Count every job again (a scan of the table, writers held back while it runs); returns
    how many rows it wrote."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("LOCK TABLE chrono_job IN SHARE ROW EXCLUSIVE MODE")
        cursor.execute("DELETE FROM chrono_job_count")
        cursor.execute(_REBUILD_SQL, [ALL_TENANTS])
        return cursor.rowcount
