"""What a failed execution shows: to its tenant the exception's type and message, nothing of the
server; to platform staff the traceback as well. The task runs in process as a worker runs it
(scheduler.worker.ChronoTask), against the real database."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from chronoadmin.celery import app
from scheduler import api, occurrences, worker
from scheduler.batching import Coalescer
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.executions import start_executions
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution
from tests.integration.audit_support import ship_all

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = pytest.mark.django_db

MISSING_FILE = __file__.removesuffix(".py") + ".missing"


class CardDeclined(Exception):
    """A task's own error, raised from a module of the server."""


@app.task(name="tests.integration.charge", bind=True)
def charge(self, invoice: int) -> None:
    try:
        open(MISSING_FILE)  # noqa: SIM115 -- the error's message names a server file
    except FileNotFoundError as exc:
        raise CardDeclined(f"card declined for invoice {invoice}: {exc}") from exc


@pytest.fixture(autouse=True)
def in_process_worker(monkeypatch):
    """The worker's recording on this test's connection, without a lease keeper thread."""
    monkeypatch.setattr(worker, "_starts", Coalescer(start_executions))
    monkeypatch.setattr(worker, "lease_keeper", lambda config: type(
        "Keeper", (), {"hold": lambda *a: None, "release": lambda *a: None})())


def run_failing_task(tenant) -> str:
    """A one-time job of ``charge`` dispatched and run once, failing; its execution id."""
    job = api.schedule_once(charge.name, tenant=tenant, delay=0, args=[77])
    fire_ms = datetime_to_ms(job.next_run_at)
    occurrences.load_and_insert([(str(job.job_id), fire_ms)])
    execution_id = str(execution_id_for(str(job.job_id), fire_ms))
    occurrences.record_dispatched([(uuid.UUID(execution_id), fire_ms, now_ms())],
                                  advances=[occurrences.JobAdvance(
                                      str(job.job_id), fire_ms, None, now_ms())])
    charge.push_request(chrono_execution_id=execution_id, chrono_attempt="1",
                        chrono_tenant_id=str(tenant.tenant_id),
                        hostname="w1@host", args=[77], kwargs={}, delivery_info={})
    try:
        with pytest.raises(CardDeclined):
            charge(77)
    finally:
        charge.pop_request()
    return execution_id


def test_a_tenant_sees_the_error_type_and_message_without_traceback_or_server_paths(tenant_api):
    execution_id = run_failing_task(tenant_api.tenant)

    shown = tenant_api.get(f"/api/v1/executions/{execution_id}/").json()
    assert shown["status"] == "FAILED"
    assert shown["error"] == (
        "tests.integration.test_execution_errors.CardDeclined: card declined for invoice 77: "
        "[Errno 2] No such file or directory: '<server path>'")
    listed = tenant_api.get("/api/v1/executions/", {"job": shown["job_id"]}).json()["results"]
    assert [execution["error"] for execution in listed] == [shown["error"]]
    assert "traceback" not in shown


def test_the_traceback_is_kept_for_platform_staff(tenant_api):
    execution_id = run_failing_task(tenant_api.tenant)

    execution = Execution.objects.get(execution_id=execution_id)
    assert execution.traceback.startswith("Traceback (most recent call last):")
    assert __file__ in execution.traceback and MISSING_FILE in execution.traceback
    assert execution.traceback.rstrip().endswith("card declined for invoice 77: [Errno 2] No "
                                                 f"such file or directory: '{MISSING_FILE}'")
    staff = Client()
    staff.force_login(User.objects.create_user("ops", password="x", is_staff=True,
                                               is_superuser=True))
    page = staff.get(f"/admin/scheduler/execution/{execution_id}/change/")
    assert page.status_code == 200
    assert "Traceback (most recent call last):" in page.content.decode()


def test_a_tenants_audit_search_holds_no_traceback_either(tenant_api, indexer):
    execution_id = run_failing_task(tenant_api.tenant)
    ship_all(indexer)

    response = tenant_api.get("/api/v1/audit/", {"execution": execution_id,
                                                "action": "execution.failed"})
    (failed,) = response.json()["results"]
    assert failed["error"] == {
        "type": "tests.integration.test_execution_errors.CardDeclined",
        "message": "card declined for invoice 77: [Errno 2] No such file or directory: "
                   "'<server path>'"}
    assert "Traceback" not in response.content.decode()
    assert MISSING_FILE not in response.content.decode()
    assert __file__ not in response.content.decode()


def test_a_stack_trace_in_an_older_document_is_not_shown_to_its_tenant(tenant_api, indexer):
    from scheduler.executions import finish_execution, start_execution
    from scheduler.models import ExecutionStatus

    # A failure as workers recorded them before: the whole traceback in error.
    job = api.schedule_once("billing.charge", tenant=tenant_api.tenant, delay=0)
    fire_ms = datetime_to_ms(job.next_run_at)
    occurrences.load_and_insert([(str(job.job_id), fire_ms)])
    execution_id = str(execution_id_for(str(job.job_id), fire_ms))
    started = start_execution(execution_id, attempt=1, worker_id="w1", lease_ttl_ms=60_000)
    finish_execution(started, status=ExecutionStatus.FAILED, error=(
        'Traceback (most recent call last):\n  File "/srv/chrono/billing/tasks.py", line 3, in '
        "charge\nbilling.errors.CardDeclined: card 4242 declined\n"))
    ship_all(indexer)

    (failed,) = tenant_api.get("/api/v1/audit/", {
        "execution": execution_id, "action": "execution.failed"}).json()["results"]
    assert failed["error"] == {"type": "billing.errors.CardDeclined",
                               "message": "card 4242 declined"}


def test_the_migration_moves_the_tracebacks_rows_held_in_error(tenant):
    import importlib

    from django.db import connection

    migration = importlib.import_module("scheduler.migrations.0010_execution_traceback")
    job = api.schedule_once("billing.charge", tenant=tenant, delay=60)
    whole = ('Traceback (most recent call last):\n  File "/srv/billing/tasks.py", line 3, in '
             "charge\nbilling.errors.CardDeclined: card 4242 declined\n")
    tail = '  tasks.py", line 9\n    raise\n  File "/srv/x.py", line 1\nValueError: boom'
    rows = {error: Execution.objects.create(job=job, tenant=tenant, status="FAILED", error=error,
                                            scheduled_for=job.next_run_at).execution_id
            for error in (whole, tail, "lost: attempt 1 on worker w1 stopped renewing its lease")}
    with connection.cursor() as cursor:
        cursor.execute(migration.MOVE_TRACEBACKS)
    moved = {error: Execution.objects.values_list("error", "traceback").get(execution_id=pk)
             for error, pk in rows.items()}
    assert moved == {
        whole: ("billing.errors.CardDeclined: card 4242 declined", whole),
        tail: ("ValueError: boom", tail),
        "lost: attempt 1 on worker w1 stopped renewing its lease": (
            "lost: attempt 1 on worker w1 stopped renewing its lease", ""),
    }
