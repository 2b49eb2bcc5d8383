"""A real ``chrono worker``: JSON log lines with ``--log-format json``, and no native delayed
delivery set up (Chrono sends no ETA; Celery's step only declared unused exchanges and queues
and warned that ETA tasks would block the worker)."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_worker_logs_json_and_sets_up_no_delayed_delivery(platform, tenant):
    from reaper.models import Worker
    from scheduler import api

    hostname = f"json@{platform.queue}"
    worker = platform.group.start("worker-json", [
        "worker", "--queues", platform.queue, "--concurrency", "1", "--pool", "solo",
        "--hostname", hostname, "--include", "tests.e2e.tasks", "--log-level", "INFO",
        "--log-format", "json"])
    worker.wait_until(lambda: Worker.objects.filter(worker_id=hostname).exists(),
                      timeout_s=60, what="its first heartbeat")
    platform.start_beat()
    job = api.schedule_once("e2e.record_run", tenant=tenant, delay=0, queue=platform.queue,
                            kwargs={"label": "json-log"})
    from scheduler.models import Execution

    worker.wait_until(lambda: Execution.objects.filter(job_id=job.job_id,
                                                       status="SUCCEEDED").exists(),
                      timeout_s=60, what="running the job")
    log = worker.log_path.read_text(errors="replace")
    assert "delayed delivery" not in log and "ETA" not in log, log[-2000:]
    objects = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(entry["logger"].startswith("celery") for entry in objects), log[-2000:]
    assert all({"timestamp", "level", "logger", "message"} <= entry.keys() for entry in objects)
