"""The dashboard's all-tenants view from the reapers' snapshot (chronoadmin.dashboard_snapshot):
a real ``chrono reaper`` writes it into the tests' Redis, the view serves it with its time and
age, a missing or stale one is computed live and says why, one reaper at a time computes it,
and a tenant's staff never get it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client

from chronoadmin.dashboard_snapshot import (
    SNAPSHOT_KEY,
    TURN_KEY,
    VIEWED_FOR_MS,
    VIEWED_KEY,
    DashboardSnapshotter,
    SnapshotCollector,
    read_snapshot,
    tenant_snapshot_key,
    write_snapshot,
)
from chronocore.models import StaffRole
from chronocore.staff import add_member
from scheduler import rollups
from scheduler.clock import datetime_to_ms, now_ms
from tests.integration.conftest import platform_staff_user

pytestmark = pytest.mark.django_db(transaction=True)

# A figure no live computation makes: an answer holding it came from the snapshot.
SENTINEL_TIMERS = 987_654_321


def _counted(tenant, n: int) -> None:
    accumulator = rollups.Accumulator()
    for _ in range(n):
        accumulator.note_dispatched(now_ms(), str(tenant.tenant_id), "billing.charge",
                                    lateness_ms=2)
    rollups.write_counts(accumulator.drain())


def _platform_client() -> Client:
    client = Client()
    client.force_login(platform_staff_user("pat"))
    return client


def _snapshot_with_sentinel(redis_client, *, age_ms: int) -> int:
    as_of_ms = now_ms() - age_ms
    write_snapshot(redis_client, {"generated_at": datetime.now(UTC).isoformat(),
                                  "window_minutes": 60, "series": [], "tasks": [],
                                  "top_failing": [], "jobs_by_status": {}, "workers": [],
                                  "stuck": {"lease_expired": 0, "retry_overdue": 0,
                                            "counted_up_to": 1000},
                                  "timers_pending": SENTINEL_TIMERS, "queues": None,
                                  "tenant": None}, as_of_ms=as_of_ms)
    return as_of_ms


def test_the_reaper_writes_the_snapshot_and_the_view_serves_it_with_its_time(
        platform, redis_client, tenant):
    _counted(tenant, 4)
    platform.start_reaper(dashboard_snapshot_interval_ms=500)
    deadline = time.monotonic() + 30
    while redis_client.get(SNAPSHOT_KEY) is None:
        assert time.monotonic() < deadline, "no snapshot written by the reaper within 30 s"
        time.sleep(0.1)
    client = _platform_client()
    answer = client.get("/admin/dashboard/data/").json()
    assert answer["source"] == "snapshot"
    assert "live_reason" not in answer
    as_of = datetime.fromisoformat(answer["as_of"])
    assert abs((datetime.now(UTC) - as_of).total_seconds()) < 10
    assert 0 <= answer["age_s"] < 10
    assert sum(p["dispatched"] for p in answer["series"]) == 4  # the reaper's figures
    assert answer["tenant"] is None and answer["timers_pending"] is not None
    # The snapshot moves on: a later answer is of a later computation.
    first = answer["as_of"]
    deadline = time.monotonic() + 15
    while client.get("/admin/dashboard/data/").json()["as_of"] == first:
        assert time.monotonic() < deadline, "the snapshot was not renewed within 15 s"
        time.sleep(0.2)


def test_the_view_serves_a_fresh_snapshot_as_it_is(redis_client, tenant):
    as_of_ms = _snapshot_with_sentinel(redis_client, age_ms=1_500)
    answer = _platform_client().get("/admin/dashboard/data/").json()
    assert answer["source"] == "snapshot"
    assert answer["timers_pending"] == SENTINEL_TIMERS
    assert datetime_to_ms(datetime.fromisoformat(answer["as_of"])) == as_of_ms
    assert 1.4 <= answer["age_s"] < 5


def test_a_stale_snapshot_falls_back_to_live_and_says_why(redis_client, tenant,
                                                          chrono_config):
    chrono_config(dashboard_snapshot_max_age_ms=5_000)
    _counted(tenant, 2)
    _snapshot_with_sentinel(redis_client, age_ms=6_000)
    answer = _platform_client().get("/admin/dashboard/data/").json()
    assert answer["source"] == "live"
    assert answer["timers_pending"] != SENTINEL_TIMERS
    assert "s old, older than 5 s" in answer["live_reason"]
    assert sum(p["dispatched"] for p in answer["series"]) == 2
    assert 0 <= answer["age_s"] < 5 and answer["as_of"] == answer["generated_at"]


def test_a_missing_snapshot_falls_back_to_live_and_says_why(redis_client, tenant):
    answer = _platform_client().get("/admin/dashboard/data/").json()
    assert answer["source"] == "live"
    assert answer["live_reason"].startswith("no snapshot")
    assert "chrono reaper" in answer["live_reason"]


def test_a_tenants_view_reads_its_own_snapshot_never_the_platforms_or_another(
        redis_client, tenant, other_tenant):
    _counted(tenant, 3)
    _snapshot_with_sentinel(redis_client, age_ms=0)  # the platform's
    user = User.objects.create_user("ann", password="x")
    add_member(user, tenant, StaffRole.VIEWER)
    ann = Client()
    ann.force_login(user)
    first = ann.get("/admin/dashboard/data/").json()  # no filter: their tenant
    assert first["tenant"] == "acme" and first["source"] == "live"
    assert first["live_reason"].startswith("no snapshot of this tenant yet")
    assert first["timers_pending"] is None
    assert sum(p["dispatched"] for p in first["series"]) == 3
    viewed = {t.decode() for t in redis_client.zrange(VIEWED_KEY, 0, -1)}
    assert viewed == {str(tenant.tenant_id)}

    snapshotter = DashboardSnapshotter(client=redis_client, interval_ms=60_000,
                                       heartbeat_interval_s=5, owner="reaper-a")
    snapshotter.run_once()
    assert snapshotter.counters.tenants == 1
    assert redis_client.get(tenant_snapshot_key(str(other_tenant.tenant_id))) is None
    _counted(tenant, 2)  # after the snapshot: a live computation would count 5
    answer = ann.get("/admin/dashboard/data/").json()
    assert answer["tenant"] == "acme" and answer["source"] == "snapshot"
    assert "live_reason" not in answer and 0 <= answer["age_s"] < 10
    assert answer["timers_pending"] is None
    assert sum(p["dispatched"] for p in answer["series"]) == 3

    filtered = _platform_client().get("/admin/dashboard/data/", {"tenant": "globex"}).json()
    assert filtered["tenant"] == "globex" and filtered["source"] == "live"
    assert filtered["timers_pending"] is None and filtered["series"][-1]["dispatched"] == 0
    assert ann.get("/admin/dashboard/data/", {"tenant": "globex"}).status_code == 404


def test_tenants_not_viewed_for_a_minute_get_no_snapshot(redis_client, tenant, other_tenant):
    redis_client.zadd(VIEWED_KEY, {str(tenant.tenant_id): now_ms(),
                                   str(other_tenant.tenant_id): now_ms() - VIEWED_FOR_MS - 1})
    DashboardSnapshotter(client=redis_client, interval_ms=60_000, heartbeat_interval_s=5,
                         owner="reaper-a").run_once()
    assert redis_client.get(tenant_snapshot_key(str(tenant.tenant_id))) is not None
    assert redis_client.get(tenant_snapshot_key(str(other_tenant.tenant_id))) is None
    assert redis_client.zrange(VIEWED_KEY, 0, -1) == [str(tenant.tenant_id).encode()]


def test_one_snapshotter_computes_per_turn_and_counts_its_cost(redis_client, tenant):
    first = DashboardSnapshotter(client=redis_client, interval_ms=60_000,
                                 heartbeat_interval_s=5, owner="reaper-a")
    second = DashboardSnapshotter(client=redis_client, interval_ms=60_000,
                                  heartbeat_interval_s=5, owner="reaper-b")
    assert 59 < first.run_once() <= 60  # the next an interval after this one started
    assert second.run_once() == 60
    assert (first.counters.written, second.counters.written) == (1, 0)
    assert second.counters.skipped == 1
    assert redis_client.get(TURN_KEY) == b"reaper-a"
    assert first.counters.last_seconds > 0 and first.counters.last_bytes > 100
    reading = read_snapshot(redis_client, now_ms=now_ms(), max_age_ms=10_000,
                            interval_ms=60_000)
    assert reading.data is not None and reading.data["tenant"] is None
    series = {family.name: family.samples[0].value
              for family in SnapshotCollector(first).collect()}
    assert series["chrono_reaper_dashboard_snapshots"] == 1
    assert series["chrono_reaper_dashboard_snapshot_seconds"] == first.counters.seconds


def test_a_slow_computation_holds_the_turn_longer(redis_client):
    def slow(**arguments):
        time.sleep(0.3)
        return {"generated_at": arguments["now"].isoformat()}

    snapshotter = DashboardSnapshotter(client=redis_client, interval_ms=200,
                                       heartbeat_interval_s=5, owner="reaper-a", compute=slow)
    wait_s = snapshotter.run_once()
    # d >= 0.3 s of work is at most a tenth of the time: the next turn 10 d after this one
    # began, 9 d after it ended, for this reaper and the others.
    took_s = snapshotter.counters.last_seconds
    assert took_s >= 0.3
    assert abs(wait_s - 9 * took_s) < 0.01
    assert 9_000 * took_s - 500 < redis_client.pttl(TURN_KEY) <= 9_000 * took_s


def test_an_unreadable_snapshot_is_computed_live_and_says_why(redis_client, tenant):
    redis_client.set(SNAPSHOT_KEY, b"{not json")
    answer = _platform_client().get("/admin/dashboard/data/").json()
    assert answer["source"] == "live"
    assert "unreadable" in answer["live_reason"]


def test_the_snapshot_is_off_when_its_interval_is_zero(redis_client, tenant, chrono_config):
    chrono_config(dashboard_snapshot_interval_ms=0)
    _snapshot_with_sentinel(redis_client, age_ms=0)
    answer = _platform_client().get("/admin/dashboard/data/").json()
    assert answer["source"] == "live"
    assert "CHRONO_DASHBOARD_SNAPSHOT_INTERVAL_MS=0" in answer["live_reason"]
