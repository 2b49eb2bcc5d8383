"""Execution logs with real processes: a beat, workers (a thread pool and a prefork one) and
``chrono indexer`` shipping the spool they share. A retried task's lines appear under its
execution with the right attempt (search, API, admin); two tasks running at once in one
thread-pool worker never mix their lines; a worker killed with SIGKILL mid-task keeps the lines
it flushed before the kill."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from chronocore.models import ApiKey
from scheduler import api
from scheduler.models import Job
from search.log_stream import LogStream, uninstall
from tests.helpers import wait_for

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FLUSH_MS = 200
LOG_ENV = {"execution_log_flush_interval_ms": FLUSH_MS, "audit_index_replicas": 0}


@pytest.fixture
def logs_platform(platform, audit_stream, search_client):
    """Beat, indexer (audit and logs) and a spool directory the workers share with it."""
    spool = Path(platform.group.env["CHRONO_EXECUTION_LOG_SPOOL_DIR"])  # the test's own
    platform.start_beat()
    platform.group.start("indexer", ["indexer"], env={
        "CHRONO_LOG_SHIPPER_POLL_INTERVAL_MS": "50", "CHRONO_INDEXER_IN_DOUBT_GRACE_MS": "200"})
    stream = LogStream(audit_stream.namespace)
    platform.log_stream, platform.spool = stream, spool
    yield platform
    uninstall(search_client, stream)


def lines_of(search_client, stream: LogStream, execution_id) -> list[dict]:
    try:
        search_client.refresh(stream.name)
    except Exception:  # noqa: BLE001 - the shipper has not created the stream yet
        return []
    reply = search_client.search(stream.name, {
        "query": {"term": {"chrono.execution_id": str(execution_id)}},
        "sort": [{"chrono.attempt": "asc"}, {"event.sequence": "asc"}], "size": 1000})
    return [hit["_source"] for hit in reply["hits"]["hits"]]


def schedule(platform, tenant, **kwargs):
    job = api.schedule_once("e2e.log_lines", tenant=tenant, delay=0.3, kwargs=kwargs,
                            queue=platform.queue)
    Job.objects.filter(pk=job.pk).update(max_retries=2, retry_policy={
        "initial_delay_ms": 200, "multiplier": 2.0, "max_delay_ms": 500})
    return job


def test_a_retried_tasks_lines_appear_under_its_execution_with_each_attempt(
        logs_platform, tenant, search_client):
    logs_platform.start_worker(pool="threads", concurrency=4, **LOG_ENV)
    job = schedule(logs_platform, tenant, label="retried", count=3, fail_attempts=1)
    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(), timeout_s=60)
    execution = job.executions.get()
    assert execution.attempt == 2

    def messages() -> list[tuple[int, str]]:
        return [(line["chrono"]["attempt"], line["message"])
                for line in lines_of(search_client, logs_platform.log_stream,
                                     execution.execution_id)]

    expected_per_attempt = 3 + 1 + 1  # its lines, the printed one and one (attempt 1) error
    assert wait_for(lambda: len(messages()) >= 2 * expected_per_attempt - 1, timeout_s=30), \
        messages()
    seen = messages()
    for attempt in (1, 2):
        mine = [message for number, message in seen if number == attempt]
        assert mine[:3] == [f"retried line {i} of attempt {attempt}" for i in range(3)]
        assert f"retried printed by attempt {attempt}" in mine
        # A thread the task started has a context of its own: in a thread pool, whose task
        # it serves cannot be told, so its line is not captured (a prefork child's is).
        assert not any("from a thread" in message for message in mine)
    assert any(n == 1 and "RuntimeError: retried fails attempt 1" in m for n, m in seen)
    assert not any(n == 2 and "fails" in m for n, m in seen)
    docs = lines_of(search_client, logs_platform.log_stream, execution.execution_id)
    assert {doc["chrono"]["tenant_id"] for doc in docs} == {str(tenant.tenant_id)}
    assert {doc["chrono"]["job_id"] for doc in docs} == {str(job.job_id)}
    assert {doc["chrono"]["job_type"] for doc in docs} == {"e2e.log_lines"}

    _, key = ApiKey.objects.issue(tenant=tenant, name="e2e")
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {key}")
    detail = client.get(f"/api/v1/executions/{execution.execution_id}/").json()
    page = client.get(detail["logs_url"], {"attempt": 2}).json()
    assert [line["message"] for line in page["results"]][:3] == [
        f"retried line {i} of attempt 2" for i in range(3)]
    assert {line["attempt"] for line in page["results"]} == {2}

    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="x"))
    admin_page = staff.get(
        f"/admin/scheduler/execution/{execution.execution_id}/change/").content.decode()
    assert "retried line 0 of attempt 1" in admin_page
    assert "retried line 2 of attempt 2" in admin_page


def test_two_tasks_at_once_in_one_thread_pool_worker_never_mix_their_lines(
        logs_platform, tenant, search_client):
    logs_platform.start_worker(pool="threads", concurrency=4, **LOG_ENV)
    jobs = {label: schedule(logs_platform, tenant, label=label, count=30, pause_s=0.02)
            for label in ("alpha", "beta")}

    def done() -> bool:
        return all(job.executions.filter(status="SUCCEEDED").exists() for job in jobs.values())

    assert wait_for(done, timeout_s=60)
    executions = {label: job.executions.get() for label, job in jobs.items()}
    assert len({e.worker_id for e in executions.values()}) == 1, "one worker ran both"

    def lines(label: str) -> list[dict]:
        return lines_of(search_client, logs_platform.log_stream,
                        executions[label].execution_id)

    assert wait_for(lambda: all(len(lines(label)) >= 31 for label in jobs), timeout_s=30)
    for label in jobs:
        messages = [line["message"] for line in lines(label)]
        assert messages[:30] == [f"{label} line {i} of attempt 1" for i in range(30)]
        other = "beta" if label == "alpha" else "alpha"
        assert not any(other in message for message in messages)
    # They did run at once: each one's lines span a time the other's lines fall into.
    alpha = [line["@timestamp"] for line in lines("alpha")[:30]]
    beta = [line["@timestamp"] for line in lines("beta")[:30]]
    assert alpha[0] < beta[-1] and beta[0] < alpha[-1], (alpha, beta)
    threads = {label: {line["process"]["thread"]["name"] for line in lines(label)[:30]}
               for label in jobs}
    assert threads["alpha"].isdisjoint(threads["beta"])


def test_a_worker_killed_with_sigkill_mid_task_keeps_the_lines_it_flushed(
        logs_platform, tenant, search_client):
    worker = logs_platform.start_worker(pool="prefork", concurrency=1, **LOG_ENV)
    job = schedule(logs_platform, tenant, label="doomed", count=3, hang_s=60)

    def spooled() -> bytes:
        return b"".join(path.read_bytes() for path in logs_platform.spool.glob("*.ndjson"))

    # Written to the spool: flushed before the kill (within one flush interval of logging it).
    assert wait_for(lambda: b"doomed hangs for" in spooled(), timeout_s=60)
    execution = job.executions.get()
    worker.signal_group(signal.SIGKILL)
    worker.popen.wait(10)
    time.sleep(FLUSH_MS / 1000)

    def messages() -> list[str]:
        return [line["message"] for line in lines_of(
            search_client, logs_platform.log_stream, execution.execution_id)]

    assert wait_for(lambda: "doomed hangs for 60.0 s" in messages(), timeout_s=30), messages()
    seen = messages()
    assert seen[:3] == [f"doomed line {i} of attempt 1" for i in range(3)]
    # A prefork child runs one task at a time: the line of a thread it started is its task's.
    assert "doomed from a thread of attempt 1" in seen
    assert "doomed printed by attempt 1" in seen
    assert "doomed woke up" not in seen
    docs = lines_of(search_client, logs_platform.log_stream, execution.execution_id)
    assert {doc["chrono"]["attempt"] for doc in docs} == {1}
    assert len({doc["event"]["sequence"] for doc in docs}) == len(docs)


def test_the_capture_and_the_shipper_count_on_their_probe_ports(platform, audit_stream,
                                                                 search_client):
    from chronocore.probe import free_port
    from tests.metrics_support import probe_health, probe_metrics, value

    worker_port, shipper_port = free_port(), free_port()
    spool = Path(platform.group.env["CHRONO_EXECUTION_LOG_SPOOL_DIR"])
    platform.start_beat()
    # A worker host's shipper: the spool alone, its series on its own probe port.
    platform.group.start("shipper", ["indexer", "--logs-only", "--metrics-port",
                                     str(shipper_port)], env={
        "CHRONO_LOG_SHIPPER_POLL_INTERVAL_MS": "50", "CHRONO_INDEXER_IN_DOUBT_GRACE_MS": "200"})
    # Prefork: the lines are captured in the pool's child, the series added up by the parent.
    platform.start_worker(pool="prefork", concurrency=1, metrics_port=worker_port,
                          execution_log_max_bytes=4096, **LOG_ENV)
    stream = LogStream(audit_stream.namespace)
    from chronocore.models import Tenant

    tenant = Tenant.objects.create(slug="metered", name="Metered")
    job = schedule(platform, tenant, label="metered", count=30)
    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(), timeout_s=60)
    execution = job.executions.get()

    def lines() -> list[dict]:
        return lines_of(search_client, stream, execution.execution_id)

    assert wait_for(lambda: any("were dropped" in line["message"] for line in lines()),
                    timeout_s=30), lines()
    shipped = lines()
    closing = shipped[-1]["chrono"]
    assert closing["dropped_lines"] > 0

    def worker_series() -> str:
        return probe_metrics(worker_port)

    assert wait_for(lambda: (value(worker_series(), "chrono_worker_log_lines_captured_total")
                             or 0) >= len(shipped), timeout_s=10)
    worker = worker_series()
    assert value(worker, "chrono_worker_log_lines_captured_total") == len(shipped)
    assert value(worker, "chrono_worker_log_dropped_lines_total",
                 reason="attempt_limit") == closing["dropped_lines"]
    assert value(worker, "chrono_worker_log_dropped_bytes_total",
                 reason="attempt_limit") == closing["dropped_bytes"]
    assert value(worker, "chrono_worker_log_dropped_lines_total", reason="buffer_full") == 0
    assert value(worker, "chrono_worker_log_spooled_bytes_total") > 0

    shipper = probe_metrics(shipper_port)
    assert value(shipper, "chrono_log_shipper_lines_total", result="created") == len(shipped)
    assert value(shipper, "chrono_log_shipper_bulk_errors_total", kind="request") == 0
    assert value(shipper, "chrono_log_shipper_batches_total") >= 1
    assert value(shipper, "chrono_log_shipper_batch_lag_seconds_count") >= 1
    # Logged to answered: a flush interval, the poll and the _bulk; bounded on a loaded box.
    assert 0 < value(shipper, "chrono_log_shipper_lag_seconds") < 30
    assert value(shipper, "chrono_log_shipper_active") == 1
    assert wait_for(lambda: value(probe_metrics(shipper_port),
                                  "chrono_log_shipper_spool_pending_bytes") == 0, timeout_s=10)
    assert spool.exists()
    status, body = probe_health(shipper_port)
    assert status == 200 and body["checks"]["log_shipper"]["active"] is True, body
    assert "batches" not in body["checks"], "--logs-only runs no audit indexer"
