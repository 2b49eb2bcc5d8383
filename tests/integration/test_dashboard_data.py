"""The dashboard's figures come from the rollups the processes write, per tenant and for the
platform, and its JSON endpoint is for staff only."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from chronoadmin import dashboard_data as dashboard_data_module
from chronoadmin.dashboard_data import dashboard_data
from scheduler import api, rollups
from scheduler.clock import datetime_to_ms
from scheduler.models import Execution, ExecutionRollup, ExecutionStatus

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 12, 30, 15, tzinfo=UTC)


def _counted(tenant_id: str, at: datetime, *, task: str = "billing.charge", n: int = 1,
             failed: int = 0, start_lateness_ms: int = 4, duration_ms: int = 120) -> None:
    acc = rollups.Accumulator()
    at_ms = datetime_to_ms(at)
    for i in range(n):
        acc.note_dispatched(at_ms, tenant_id, task, lateness_ms=2)
        acc.note_started(at_ms, tenant_id, task, lateness_ms=start_lateness_ms)
        acc.note_finished(at_ms, tenant_id, task, succeeded=i >= failed, duration_ms=duration_ms)
    rollups.write_counts(acc.drain())


def test_upserts_from_several_processes_add_up(tenant):
    _counted(str(tenant.tenant_id), NOW, n=3)
    _counted(str(tenant.tenant_id), NOW, n=2, failed=1)
    row = ExecutionRollup.objects.get(tenant_id=tenant.tenant_id, task="billing.charge")
    assert (row.dispatched, row.started, row.succeeded, row.failed) == (5, 5, 4, 1)
    assert sum(row.duration) == 5
    assert row.duration_sum_ms == 600
    for tenant_id, task in ((rollups.ALL_TENANTS, "billing.charge"),
                            (tenant.tenant_id, rollups.ALL_TASKS),
                            (rollups.ALL_TENANTS, rollups.ALL_TASKS)):
        total = ExecutionRollup.objects.get(tenant_id=tenant_id, task=task)
        assert (total.dispatched, total.failed, total.duration_sum_ms) == (5, 1, 600)


def test_series_covers_the_hour_minute_by_minute_with_percentiles(tenant, other_tenant):
    _counted(str(tenant.tenant_id), NOW - timedelta(minutes=2), n=10, start_lateness_ms=30)
    _counted(str(other_tenant.tenant_id), NOW, n=4, failed=4, task="reports.nightly")
    _counted(str(tenant.tenant_id), NOW - timedelta(hours=2), n=50)  # outside the window
    data = dashboard_data(tenant_id=None, heartbeat_interval_s=5, now=NOW)
    series = data["series"]
    assert len(series) == 60
    assert series[-1]["minute"] == "2026-12-01T12:30:00+00:00"
    assert series[-3]["dispatched"] == 10 and series[-1]["failed"] == 4
    assert 20 <= series[-3]["start_p99_ms"] <= 50
    assert sum(p["dispatched"] for p in series) == 14
    assert series[0]["start_p50_ms"] is None
    assert [t["task"] for t in data["top_failing"]] == ["reports.nightly"]
    assert {t["task"] for t in data["tasks"]} == {"billing.charge", "reports.nightly"}


def test_the_task_tables_show_the_busiest_and_the_most_failing_with_their_durations(tenant):
    tenant_id = str(tenant.tenant_id)
    for i in range(25):  # 25 tasks, task.00 the busiest: 50 runs, task.24 the quietest
        _counted(tenant_id, NOW - timedelta(minutes=i), task=f"task.{i:02}", n=50 - i,
                 duration_ms=10 * (i + 1))
    _counted(tenant_id, NOW, task="rare.failing", n=3, failed=2, duration_ms=900)
    data = dashboard_data(tenant_id=tenant_id, heartbeat_interval_s=5, now=NOW)

    assert [t["task"] for t in data["tasks"]] == [f"task.{i:02}" for i in range(20)]
    assert [t["task"] for t in data["top_failing"]] == ["rare.failing"]  # not among the busiest
    failing = data["top_failing"][0]
    assert (failing["succeeded"], failing["failed"], failing["failure_rate"]) == (1, 2, 0.6667)
    assert failing["duration_mean_ms"] == 900.0
    assert 500 <= failing["duration_p50_ms"] <= 1_000  # its own histogram, not another's
    busiest = data["tasks"][0]
    assert (busiest["succeeded"], busiest["duration_mean_ms"]) == (50, 10.0)
    assert busiest["duration_p95_ms"] <= 20


def test_a_tenant_view_holds_only_that_tenants_counts(tenant, other_tenant):
    _counted(str(tenant.tenant_id), NOW, n=3)
    _counted(str(other_tenant.tenant_id), NOW, n=7, task="reports.nightly")
    data = dashboard_data(tenant_id=str(tenant.tenant_id), heartbeat_interval_s=5, now=NOW)
    assert sum(p["dispatched"] for p in data["series"]) == 3
    assert [t["task"] for t in data["tasks"]] == ["billing.charge"]
    assert data["workers"] == [] and data["timers_pending"] is None


def test_the_data_endpoint_is_for_staff_and_filters_by_tenant_slug(client, admin_client, tenant,
                                                                   redis_client):
    assert client.get("/admin/dashboard/data/").status_code == 302  # to the login page
    _counted(str(tenant.tenant_id), datetime.now(UTC), n=2)
    answer = admin_client.get("/admin/dashboard/data/?tenant=acme")
    assert answer.status_code == 200
    assert answer.json()["tenant"] == "acme"
    assert sum(p["dispatched"] for p in answer.json()["series"]) == 2
    missing = admin_client.get("/admin/dashboard/data/?tenant=nobody")
    assert missing.status_code == 404 and "nobody" in missing.json()["detail"]


def test_the_dashboard_page_has_the_admin_header_and_one_heading(admin_client):
    page = admin_client.get("/admin/dashboard/").content.decode()
    assert "Django administration" not in page
    assert page.count("Live dashboard</h1>") == 1
    assert "chart.umd.min.js" in page


def test_histograms_are_summed_bucket_by_bucket_across_tasks_and_minutes(tenant):
    """The series folds every task's histogram of a minute, the task table every minute's of a
    task, and each percentile is the one of the summed buckets."""
    tenant_id = str(tenant.tenant_id)
    _counted(tenant_id, NOW, task="a", n=90, start_lateness_ms=3)
    _counted(tenant_id, NOW, task="b", n=10, start_lateness_ms=700)
    _counted(tenant_id, NOW - timedelta(minutes=5), task="a", n=5, duration_ms=40_000)
    data = dashboard_data(tenant_id=tenant_id, heartbeat_interval_s=5, now=NOW)
    last = data["series"][-1]
    merged = rollups.Counts()
    for task in ("a", "b"):
        merged = rollups.merge_counts(merged, rollups.Counts(
            start_lateness=list(ExecutionRollup.objects.get(
                tenant_id=tenant_id, minute=NOW.replace(second=0, microsecond=0),
                task=task).start_lateness)))
    assert last["started"] == 100
    assert last["start_p50_ms"] == round(rollups.quantile_ms(merged.start_lateness, 0.5), 1)
    assert last["start_p99_ms"] == round(rollups.quantile_ms(merged.start_lateness, 0.99), 1)
    assert 500 < last["start_p99_ms"] <= 1_000 and last["start_p50_ms"] <= 5
    task_a = next(t for t in data["tasks"] if t["task"] == "a")
    assert task_a["succeeded"] == 95
    assert 20_000 < task_a["duration_p95_ms"] <= 60_000  # the 5 slow runs are > 5 % of 95
    assert task_a["duration_p50_ms"] <= 200


def test_the_platform_s_all_tasks_rows_are_rebuilt_from_its_task_rows(tenant, other_tenant):
    _counted(str(tenant.tenant_id), NOW, n=3)
    _counted(str(other_tenant.tenant_id), NOW, n=2, task="reports.nightly")
    ExecutionRollup.objects.filter(task="reports.nightly").delete()  # as a bench's clean-up
    rollups.rebuild_platform_task_totals(datetime_to_ms(NOW - timedelta(hours=1)))
    total = ExecutionRollup.objects.get(tenant_id=rollups.ALL_TENANTS, task=rollups.ALL_TASKS)
    assert total.dispatched == 3 and sum(total.start_lateness) == 3


def _in_flight(tenant, status: str, count: int, **fields) -> None:
    job = api.schedule_cron("tests.noop", tenant=tenant, cron="*/5 * * * *")
    for i in range(count):
        Execution.objects.create(job=job, tenant=tenant, status=status,
                                 scheduled_for=NOW - timedelta(minutes=10, seconds=i), **fields)


def test_stuck_work_counts_that_tenants_up_to_the_limit(tenant, other_tenant, monkeypatch,
                                                        redis_client):
    _in_flight(tenant, ExecutionStatus.RUNNING, 3, lease_expires_at=NOW - timedelta(seconds=5))
    _in_flight(tenant, ExecutionStatus.RUNNING, 2, lease_expires_at=NOW + timedelta(seconds=30))
    _in_flight(tenant, ExecutionStatus.RETRY_WAIT, 2, retry_at=NOW - timedelta(minutes=2))
    _in_flight(tenant, ExecutionStatus.RETRY_WAIT, 1, retry_at=NOW - timedelta(seconds=10))
    _in_flight(other_tenant, ExecutionStatus.RUNNING, 4,
               lease_expires_at=NOW - timedelta(seconds=5))

    def stuck(tenant_id):
        return dashboard_data(tenant_id=tenant_id, heartbeat_interval_s=5, now=NOW)["stuck"]

    assert stuck(str(tenant.tenant_id)) == {"lease_expired": 3, "retry_overdue": 2,
                                            "counted_up_to": 1_000}
    assert stuck(None)["lease_expired"] == 7
    monkeypatch.setattr(dashboard_data_module, "STUCK_COUNT_LIMIT", 2)
    assert stuck(str(tenant.tenant_id)) == {"lease_expired": 2, "retry_overdue": 2,
                                            "counted_up_to": 2}


@pytest.mark.django_db(transaction=True)
def test_the_rollup_writer_gives_its_connection_back_after_an_idle_second(tenant):
    # The writer thread held its connection for the life of the process: an idle worker kept
    # one open, and a test run's database could not be dropped at its end ("1 other session").
    writer = rollups.RollupWriter()
    seen: list[object] = []

    def writer_thread() -> None:
        from django.db import connection

        writer.accumulator.note_started(datetime_to_ms(NOW), str(tenant.tenant_id), "idle.a", 3)
        seen.append(writer.tick())
        seen.append(connection.connection is not None)
        seen.append(writer.tick())
        seen.append(connection.connection is None)

    thread = threading.Thread(target=writer_thread)
    thread.start()
    thread.join(30)
    assert seen == [True, True, False, True]
    assert ExecutionRollup.objects.get(tenant_id=tenant.tenant_id, task="idle.a").started == 1
