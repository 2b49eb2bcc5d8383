"""Metrics and health with real processes: a queue nobody consumes is flagged by a real reaper
within its configured time and runs once a worker comes; the web's ``/metrics`` moves while real
beat and worker processes run jobs; each process's probe port answers, and a worker's turns 503
while its heartbeats are held up."""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test import Client

from chronocore.probe import free_port
from scheduler import api
from scheduler.models import Execution, ExecutionStatus
from tests.helpers import wait_for
from tests.metrics_support import probe_health, probe_metrics, value

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FLAG_AFTER_MS = 2_000


def answering(port: int) -> bool:
    return wait_for(lambda: probe_health(port)[0] in (200, 503), timeout_s=60)


def test_a_queue_without_consumers_is_flagged_in_time_and_runs_once_a_worker_consumes(
    platform, tenant
):
    reaper_port = free_port()
    with platform.together():
        platform.start_beat()
        platform.start_reaper(undelivered_flag_after_ms=FLAG_AFTER_MS,
                              undelivered_check_interval_ms=200, reaper_interval_ms=200,
                              metrics_port=reaper_port)
    job = api.schedule_once("e2e.record_run", tenant=tenant, queue=platform.queue,
                            delay=timedelta(milliseconds=200))
    executions = Execution.objects.filter(job_id=job.job_id)
    assert wait_for(lambda: executions.filter(status="DISPATCHED").exists(), timeout_s=30)
    execution = executions.get()
    assert execution.reason == ""  # not before its time

    assert wait_for(lambda: executions.get().reason != "", timeout_s=30)
    flagged_after_s = time.time() - execution.dispatched_at.timestamp()
    execution = executions.get()
    assert execution.status == ExecutionStatus.DISPATCHED
    assert execution.reason == f"no consumer on queue `{platform.queue}` for 2 s"
    # Flagged once past the limit, within a check interval and a loaded machine's slack.
    assert FLAG_AFTER_MS / 1000 <= flagged_after_s < FLAG_AFTER_MS / 1000 + 10
    reaper_metrics = probe_metrics(reaper_port)
    assert value(reaper_metrics, "chrono_reaper_undelivered_flagged_total",
                 queue=platform.queue) == 1
    web = Client().get("/metrics").content.decode()
    assert value(web, "chrono_undelivered_executions", queue=platform.queue) == 1
    assert value(web, "chrono_queue_consumers", queue=platform.queue) == 0
    assert value(web, "chrono_queue_messages", queue=platform.queue) == 1

    platform.start_worker()
    assert wait_for(lambda: executions.get().status == ExecutionStatus.SUCCEEDED,
                    timeout_s=60)
    assert executions.get().reason == ""
    web = Client().get("/metrics").content.decode()
    assert value(web, "chrono_undelivered_executions", queue=platform.queue) is None


def test_the_webs_metrics_and_the_beat_and_worker_probes_move_while_jobs_run(
    platform, tenant
):
    beat_port, worker_port = free_port(), free_port()
    with platform.together():
        platform.start_beat(metrics_port=beat_port)
        platform.start_worker(metrics_port=worker_port)  # prefork: the runs are in its children
    before = Client().get("/metrics").content.decode()
    assert value(before, "chrono_executions_recent", status="SUCCEEDED") is None
    assert value(before, "chrono_beat_shards_owned", replica="beat-1") == 256
    assert value(before, "chrono_queue_consumers", queue=platform.queue) >= 1
    assert value(before, "chrono_workers", health="healthy") == 1
    for source in ("redis", "postgresql", "rabbitmq"):
        assert value(before, "chrono_metrics_source_up", source=source) == 1

    jobs = [api.schedule_once("e2e.record_run", tenant=tenant, queue=platform.queue,
                              delay=timedelta(milliseconds=300)) for _ in range(20)]
    far = [api.schedule_once("e2e.record_run", tenant=tenant, queue=platform.queue,
                             delay=timedelta(hours=1)) for _ in range(5)]
    succeeded = Execution.objects.filter(job_id__in=[j.job_id for j in jobs],
                                         status=ExecutionStatus.SUCCEEDED)
    assert wait_for(lambda: succeeded.count() == 20, timeout_s=60)

    after = Client().get("/metrics").content.decode()
    assert value(after, "chrono_executions_recent", status="SUCCEEDED") == 20
    assert value(after, "chrono_timers_pending") >= len(far)
    assert value(after, "chrono_audit_outbox_unshipped_rows") > 0  # no indexer runs here
    assert value(after, "chrono_audit_outbox_lag_seconds") > 0

    def beat_published() -> float:
        return value(probe_metrics(beat_port), "chrono_beat_published_total") or 0

    assert wait_for(lambda: beat_published() >= 20, timeout_s=10)
    beat = probe_metrics(beat_port)
    assert value(beat, "chrono_beat_dispatch_lateness_seconds_count") >= 20
    assert value(beat, "chrono_beat_owned_shards") == 256
    status, body = probe_health(beat_port)
    assert status == 200, body
    assert body["checks"]["loop"]["owned_shards"] == 256

    worker = probe_metrics(worker_port)
    assert value(worker, "chrono_worker_executions_total", outcome="succeeded") == 20
    assert value(worker, "chrono_worker_start_lateness_seconds_count") == 20
    status, body = probe_health(worker_port)
    assert status == 200, body


def test_a_workers_health_turns_503_while_its_heartbeats_are_held_up(platform):
    port = free_port()
    platform.start_worker(metrics_port=port, worker_heartbeat_interval_ms=200)
    assert answering(port)
    assert wait_for(lambda: probe_health(port)[0] == 200, timeout_s=30)
    settings = connection.settings_dict
    with psycopg.connect(dbname=settings["NAME"], user=settings["USER"],
                         password=settings["PASSWORD"], host=settings["HOST"],
                         port=settings["PORT"]) as blocker:
        # The heartbeat's upsert waits for this lock: the process lives, its heartbeats stop.
        blocker.execute("SELECT 1 FROM chrono_worker WHERE worker_id = %s FOR UPDATE",
                        [f"worker-1@{platform.queue}"])
        assert wait_for(lambda: probe_health(port)[0] == 503, timeout_s=30)
        status, body = probe_health(port)
        assert body["failing"] == ["heartbeat"]
        assert body["checks"]["heartbeat"]["last_progress_s_ago"] > 0.6
        blocker.rollback()
    assert wait_for(lambda: probe_health(port)[0] == 200, timeout_s=30)


def test_the_reaper_and_indexer_probes_answer_with_their_series(
    platform, tenant, audit_stream
):
    reaper_port, indexer_port = free_port(), free_port()
    platform.start_reaper(metrics_port=reaper_port)
    platform.group.start("indexer", ["indexer", "--metrics-port", str(indexer_port)],
                         env={"CHRONO_AUDIT_NAMESPACE": audit_stream.namespace,
                              "CHRONO_INDEXER_POLL_INTERVAL_MS": "50"})
    assert answering(reaper_port) and answering(indexer_port)
    assert wait_for(lambda: probe_health(reaper_port)[0] == 200, timeout_s=30)
    assert wait_for(lambda: probe_health(indexer_port)[0] == 200, timeout_s=30)
    reaper = probe_metrics(reaper_port)
    assert value(reaper, "chrono_reaper_executions_lost_total") == 0
    assert value(reaper, "chrono_progress_age_seconds", process="reaper", loop="pass") < 5
    # Its process keeps the dashboard's snapshot, and says what that costs.
    assert wait_for(lambda: (value(probe_metrics(reaper_port),
                                   "chrono_reaper_dashboard_snapshots_total") or 0) >= 1,
                    timeout_s=30)
    reaper = probe_metrics(reaper_port)
    assert value(reaper, "chrono_reaper_dashboard_snapshot_seconds_total") > 0
    assert value(reaper, "chrono_reaper_dashboard_snapshot_last_bytes") > 100
    # Healthy while it starts; active once it holds the stream's lock.
    assert wait_for(lambda: probe_health(indexer_port)[1]["checks"]["batches"]["active"],
                    timeout_s=30), probe_health(indexer_port)
    api.schedule_once("e2e.record_run", tenant=tenant, delay=timedelta(hours=1))  # an audit row
    assert wait_for(lambda: value(probe_metrics(indexer_port), "chrono_indexer_batches_total")
                    > 0, timeout_s=30)
    indexer = probe_metrics(indexer_port)
    assert value(indexer, "chrono_indexer_active") == 1
    assert value(indexer, "chrono_indexer_shipped_rows_total", result="created") is not None
