"""PostgreSQL failover under load: the primary dies, its synchronous standby is promoted, and
the same beat, worker and reaper processes go on, with no accepted job lost.

A client (``tests/cluster/pg_client.py``) keeps creating one-time jobs through the Python API
while two cron jobs fire every second; the primary is killed (SIGKILL of its postmaster, as a
crash) and the standby promoted (``pg_ctl promote``). A job is accepted when its create call
returned: each of those must run, and the processes must be the ones started before the
failover. The gaps are printed and kept as the test's properties (``bench/RESULTS.md`` quotes
them).
"""

from __future__ import annotations

import time

import pytest

from localservices.pgcluster import wait_for_primary
from tests.cluster import pgfailover_fixtures
from tests.cluster.pgfailover_fixtures import query
from tests.helpers import delivery_log, runs, wait_for

pytestmark = [pytest.mark.e2e]
pg_pair = pgfailover_fixtures.pg_pair
pair_platform = pgfailover_fixtures.pair_platform

RATE_PER_S = 25
CLIENT_S = 30
KILL_AFTER_S = 10
DOWN_S = 2.0


def read_client(path) -> tuple[list[tuple[str, int]], list[str], list[int]]:
    """(accepted one-time jobs as (job id, accepted ms), cron job ids, failed-create ms)."""
    accepted, crons, failures = [], [], []
    for line in (path.read_text() if path.exists() else "").splitlines():
        kind, *rest = line.split(" ")
        if kind == "CRON":
            crons.append(rest[0])
        elif kind == "ERR":
            failures.append(int(rest[0]))
        elif kind not in ("START", "DONE"):
            accepted.append((kind, int(rest[1])))
    return accepted, crons, failures


def largest_gap(stamps: list[int], around_ms: int) -> int:
    """The longest interval between consecutive ``stamps`` that ends after ``around_ms``."""
    ordered = sorted(stamps)
    gaps = [b - a for a, b in zip(ordered, ordered[1:], strict=False) if b >= around_ms]
    return max(gaps, default=0)


def succeeded_jobs(pair, job_ids: list[str]) -> set[str]:
    rows = query(pair, "SELECT DISTINCT job_id::text FROM chrono_execution "
                       "WHERE job_id = ANY(%s::uuid[]) AND status = 'SUCCEEDED'", (job_ids,))
    return {row[0] for row in rows}


def missing(pair, job_ids: list[str]) -> str:
    """What became of the accepted jobs that did not succeed (for the failure message)."""
    absent = sorted(set(job_ids) - succeeded_jobs(pair, job_ids))
    rows = query(pair, "SELECT j.job_id::text, j.status, j.next_run_at, e.status, e.attempt "
                       "FROM chrono_job j LEFT JOIN chrono_execution e USING (job_id) "
                       "WHERE j.job_id = ANY(%s::uuid[])", (absent,))
    found = {row[0] for row in rows}
    return (f"{len(absent)} accepted jobs did not succeed: {rows[:20]}; "
            f"not in the database at all: {sorted(set(absent) - found)[:20]}")


def test_promoted_standby_takes_over_and_no_accepted_job_is_lost(pair_platform, tmp_path,
                                                                record_property):
    platform = pair_platform
    pair = platform.pair
    processes = [platform.start_beat(), platform.start_worker(), platform.start_reaper()]
    out = tmp_path / "client.out"
    client = platform.start_client(out, rate=RATE_PER_S, duration_s=CLIENT_S, delay_s=2)
    assert wait_for(lambda: len(read_client(out)[0]) >= RATE_PER_S * KILL_AFTER_S,
                    timeout_s=60), client.log_tail()
    old_primary, standby = pair.nodes

    killed_ms = time.time_ns() // 1_000_000
    pair.stop_node(old_primary, mode="kill")
    time.sleep(DOWN_S)
    pair.promote(standby)
    assert wait_for_primary(pair) is standby
    promoted_ms = time.time_ns() // 1_000_000

    assert client.popen.wait(CLIENT_S * 3) == 0, client.log_tail()
    accepted, crons, failures = read_client(out)
    ids = [job_id for job_id, _ in accepted]
    assert wait_for(lambda: len(succeeded_jobs(pair, ids)) == len(ids), timeout_s=120,
                    interval_s=1), missing(pair, ids)
    # The cron jobs fire again after the promotion.
    assert wait_for(lambda: all(query(
        pair, "SELECT count(*) FROM chrono_execution WHERE job_id = %s AND status = "
              "'SUCCEEDED' AND scheduled_for > to_timestamp(%s / 1000.0)",
        (cron, promoted_ms + 2_000))[0][0] >= 3 for cron in crons), timeout_s=60, interval_s=1)
    for process in processes:
        assert process.popen.poll() is None, f"{process.name} exited:\n{process.log_tail()}"

    ran = runs(platform.redis)
    duplicates = sum(count - 1 for count in ran.values() if count > 1)
    published = [stamp for _, _, stamp in delivery_log(platform.redis) if stamp]
    figures = {
        "accepted": len(ids),
        "failed_creates": len(failures),
        "create_gap_ms": largest_gap([ms for _, ms in accepted], killed_ms),
        "publish_gap_ms": largest_gap(published, killed_ms),
        "promoted_after_kill_ms": promoted_ms - killed_ms,
        "duplicate_runs": duplicates,
    }
    for name, value in figures.items():
        record_property(name, value)
    print(f"postgresql failover: {figures}")
    assert figures["failed_creates"] > 0, "the kill happened while no create was under way?"
