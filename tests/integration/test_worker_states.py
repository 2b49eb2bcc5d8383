"""A worker is up, stopped (its warm shutdown's final heartbeat: a deploy, a scale-down) or lost
(it stopped heartbeating without one). Only a lost worker is a problem: the dashboard, the
admin, the API and the metrics tell the two apart, so that a rolling deploy does not look like
a fleet of dead workers."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from chronocore.config import get_config
from chronocore.probe import Progress
from reaper.models import Worker, WorkerState
from reaper.reaper import Reaper
from scheduler.dispatch import Publisher
from scheduler.heartbeats import HeartbeatThread, beat_heart
from scheduler.timers import timer_store

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_worker_whose_heartbeats_stop_cleanly_is_stopped_and_the_reaper_leaves_it(
    redis_client,
):
    thread = HeartbeatThread("w-clean@h", "chrono", interval_ms=50,
                             progress=Progress("heartbeat", stale_after_ms=1_000))
    thread.start()
    _wait_for(lambda: Worker.objects.filter(worker_id="w-clean@h").exists())
    assert Worker.objects.get(worker_id="w-clean@h").state() == WorkerState.UP

    thread.stopping.set()  # what the worker's warm shutdown does
    thread.join(10)
    worker = Worker.objects.get(worker_id="w-clean@h")
    assert not worker.is_healthy and worker.stopped_at is not None
    assert worker.stopped_at == worker.last_heartbeat_at
    assert worker.state() == WorkerState.STOPPED

    # Long past its heartbeats, the reaper's pass does not turn it into a lost worker.
    Worker.objects.filter(worker_id="w-clean@h").update(
        last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert "w-clean@h" not in _mark_dead_workers()
    assert Worker.objects.get(worker_id="w-clean@h").state() == WorkerState.STOPPED


def test_a_worker_that_goes_silent_is_lost_before_and_after_the_reaper_marks_it(redis_client):
    beat_heart("w-killed@h", queue_name="chrono")
    Worker.objects.filter(worker_id="w-killed@h").update(
        last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    worker = Worker.objects.get(worker_id="w-killed@h")
    # Not marked yet: its flags say up, its silence says lost.
    assert worker.state() == WorkerState.UP
    assert worker.state(now=timezone.now(), silent_after=timedelta(seconds=15)) == (
        WorkerState.LOST)

    assert "w-killed@h" in _mark_dead_workers()
    worker = Worker.objects.get(worker_id="w-killed@h")
    assert not worker.is_healthy and worker.stopped_at is None
    assert worker.state() == WorkerState.LOST


def test_a_stopped_worker_started_again_is_up():
    beat_heart("w-again@h", queue_name="chrono", final=True)
    assert Worker.objects.get(worker_id="w-again@h").state() == WorkerState.STOPPED
    beat_heart("w-again@h", queue_name="chrono")
    worker = Worker.objects.get(worker_id="w-again@h")
    assert worker.is_healthy and worker.stopped_at is None
    assert worker.state() == WorkerState.UP


def _three_workers() -> None:
    now = timezone.now()
    Worker.objects.create(worker_id="w-up@h", queue_name="chrono", last_heartbeat_at=now)
    Worker.objects.create(worker_id="w-stopped@h", queue_name="chrono", is_healthy=False,
                          last_heartbeat_at=now - timedelta(minutes=2),
                          stopped_at=now - timedelta(minutes=2))
    Worker.objects.create(worker_id="w-lost@h", queue_name="chrono", is_healthy=False,
                          last_heartbeat_at=now - timedelta(minutes=3))


def test_the_dashboard_data_gives_each_worker_its_state(admin_client, redis_client):
    _three_workers()
    answer = admin_client.get("/admin/dashboard/data/")
    assert answer.status_code == 200
    states = {w["worker_id"]: (w["state"], w["healthy"]) for w in answer.json()["workers"]}
    assert states == {"w-up@h": ("up", True), "w-stopped@h": ("stopped", False),
                      "w-lost@h": ("lost", False)}


def test_the_admin_filters_workers_by_state(admin_client):
    _three_workers()
    for state, shown in (("up", "w-up@h"), ("stopped", "w-stopped@h"), ("lost", "w-lost@h")):
        page = admin_client.get(f"/admin/reaper/worker/?state={state}").content.decode()
        listed = {w for w in ("w-up@h", "w-stopped@h", "w-lost@h") if f">{w}<" in page}
        assert listed == {shown}, (state, listed)


def test_the_api_says_when_a_worker_stopped(staff_api):
    _three_workers()
    workers = {w["worker_id"]: w for w in staff_api.get("/api/v1/workers/").json()["results"]}
    assert workers["w-stopped@h"]["stopped_at"] is not None
    assert workers["w-lost@h"]["stopped_at"] is None
    assert workers["w-up@h"]["is_healthy"] is True and workers["w-up@h"]["stopped_at"] is None


def _mark_dead_workers() -> list[str]:
    config = get_config()
    reaper = Reaper(config=config, publisher=Publisher(config.broker_url), store=timer_store())
    try:
        return reaper.mark_dead_workers()
    finally:
        reaper.publisher.close()
        reaper.inspector.close()
