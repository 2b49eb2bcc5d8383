"""Tasks of an existing app (examples/billing, its own Celery app) scheduled with
``task.schedule()`` run on real workers, and their executions are recorded: on Chrono's worker
(``--include examples.billing.tasks``) and on the app's own ``celery worker``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chronocore.config import get_config
from examples.billing.tasks import REMINDER_KEY, close_month, send_invoice_reminder
from localservices.processes import REPO_ROOT, ChronoProcess
from reaper.models import Worker
from scheduler.models import ExecutionStatus
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def succeeded(job_id):
    from scheduler.models import Execution

    return Execution.objects.filter(job_id=job_id, status=ExecutionStatus.SUCCEEDED).first()


def test_decorated_tasks_scheduled_with_schedule_run_on_chronos_worker_and_are_recorded(
    platform, tenant
):
    with platform.together():
        platform.start_beat()
        platform.start_worker(include=("examples.billing.tasks",))

    # A @shared_task and an @app.task of the billing app's own Celery app.
    reminder_job = send_invoice_reminder.schedule(42, delay=0.5, tenant="acme",
                                                  queue=platform.queue)
    month_job = close_month.schedule(delay=0.5, tenant=tenant, queue=platform.queue)

    assert wait_for(lambda: succeeded(reminder_job) and succeeded(month_job), timeout_s=30)
    reminder = succeeded(reminder_job)
    assert reminder.result == {"invoice_id": 42, "sent": True, "attempt": 1}
    assert reminder.worker_id == f"worker-1@{platform.queue}"
    assert reminder.started_at >= reminder.scheduled_for
    assert succeeded(month_job).result == "closed"
    # The side effect is keyed by the execution id, as the README shows.
    ledger = platform.redis.hgetall(REMINDER_KEY.format(invoice_id=42))
    assert ledger == {str(reminder.execution_id).encode(): b"1"}


def test_the_apps_own_celery_worker_runs_and_records_a_decorated_task(platform, tenant, tmp_path):
    hostname = f"billing-own@{platform.queue}"
    with platform.together():
        platform.start_beat()
        own_worker = _start_celery_worker(platform, hostname, tmp_path / "billing-worker.log")
    own_worker.wait_until(lambda: Worker.objects.filter(worker_id=hostname).exists(),
                          timeout_s=60, what="its first heartbeat")

    job_id = send_invoice_reminder.schedule(7, delay=0.5, tenant=tenant, queue=platform.queue)

    assert wait_for(lambda: succeeded(job_id), timeout_s=30), own_worker.log_tail()
    execution = succeeded(job_id)
    assert execution.worker_id == hostname
    assert execution.result == {"invoice_id": 7, "sent": True, "attempt": 1}


def _start_celery_worker(platform, hostname: str, log_path) -> ChronoProcess:
    """``celery -A examples.billing.celery:app worker``: the app's own worker, not Chrono's,
    consuming the test queue (BILLING_QUEUE) and stopped with the platform."""
    # Celery's own command line reads BROKER_URL from the environment over the app's
    # broker_url, so the app's operator gives it with its credentials.
    env = {**os.environ, **platform.group.env, "BILLING_QUEUE": platform.queue,
           "BROKER_URL": get_config().broker_url, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "ab") as log_file:
        popen = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "examples.billing.celery:app", "worker",
             "--queues", platform.queue, "--hostname", hostname, "--concurrency", "1",
             "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = ChronoProcess(name="billing-worker", popen=popen, log_path=log_path)
    platform.group.children.append(worker)
    return worker
