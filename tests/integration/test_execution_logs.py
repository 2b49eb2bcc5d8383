"""Execution logs through the real engine: lines captured by the worker's handler, shipped from a
spool by the log shipper, read back by ``GET /api/v1/executions/{id}/logs/`` and the admin's
execution page, under their execution and attempt, never another tenant's; a batch sent again
(a shipper killed before its commit, with a rollover between) creates no duplicate; a batch the
engine did not take is not committed."""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from chronocore.config import get_config
from chronocore.models import StaffRole
from chronocore.staff import add_member
from localservices.processes import wait_until
from scheduler import api, log_capture
from scheduler.models import Execution, ExecutionStatus
from search.client import SearchClient
from search.errors import SearchUnavailable
from search.log_shipper import LogShipper
from search.log_stream import LogStream, install, uninstall
from search.spool import OFFSET_SUFFIX

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = pytest.mark.django_db(transaction=True)

task_log = logging.getLogger("tests.task")


@pytest.fixture(scope="session")
def log_stream(audit_stream, search_client):
    stream = LogStream(audit_stream.namespace)
    install(search_client, get_config(), stream)
    yield stream
    uninstall(search_client, stream)


@pytest.fixture
def spool(tmp_path, log_stream):
    """A capture writing to this test's spool, and a shipper of it (no grace for doubt)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    log_capture.install(spool_dir=tmp_path, namespace=log_stream.namespace, level="INFO",
                        flush_interval_ms=60_000, max_bytes=1 << 20, buffer_bytes=1 << 22,
                        line_bytes=4096, segment_bytes=1 << 20)
    yield tmp_path
    log_capture.uninstall()
    root.setLevel(level)


def shipper_of(spool_dir, stream, client=None) -> LogShipper:
    config = dataclasses.replace(get_config(), indexer_in_doubt_grace_ms=0)
    return LogShipper(client=client or SearchClient.from_config(config), config=config,
                      stream=stream, spool_dir=spool_dir)


def run_attempt(execution: Execution, attempt: int, *messages: str, fail: bool = False) -> None:
    """What a task body logs under ``attempt`` of ``execution``, flushed to the spool."""
    attempt_log = log_capture.AttemptLog(
        tenant_id=str(execution.tenant_id), job_id=str(execution.job_id),
        execution_id=str(execution.execution_id), attempt=attempt, worker_id="w1@it",
        job_type="tests.noop")
    with log_capture.capturing(attempt_log):
        for message in messages:
            task_log.info(message)
        if fail:
            try:
                raise ValueError("card declined")
            except ValueError:
                task_log.exception("charging failed")
    log_capture.installed().buffer.flush()


def make_execution(tenant) -> Execution:
    job = api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=600))
    return Execution.objects.create(
        job=job, tenant=tenant, scheduled_for=datetime.now(UTC),
        status=ExecutionStatus.SUCCEEDED, attempt=2, worker_id="w1@it")


def ship(spool_dir, stream, search_client) -> int:
    read = shipper_of(spool_dir, stream).drain()
    search_client.refresh(stream.name)
    return read


def logs(api_client, execution, **params):
    return api_client.get(f"/api/v1/executions/{execution.execution_id}/logs/", params)


def test_a_tasks_lines_are_read_back_under_its_execution_and_attempt_in_order(
        spool, log_stream, search_client, tenant_api, tenant):
    execution = make_execution(tenant)
    run_attempt(execution, 1, "starting", "charging the card", fail=True)
    run_attempt(execution, 2, "starting again", "charged")
    assert ship(spool, log_stream, search_client) == 5

    answer = logs(tenant_api, execution)
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["count"] == 5 and body["status"] == "SUCCEEDED" and body["next"] is None
    assert [(line["attempt"], line["sequence"], line["message"]) for line in body["results"]] == [
        (1, 1, "starting"), (1, 2, "charging the card"), (1, 3, "charging failed"),
        (2, 1, "starting again"), (2, 2, "charged")]
    failure = body["results"][2]
    assert failure["level"] == "error" and failure["error"] == {
        "type": "builtins.ValueError", "message": "card declined"}, "no stack trace for tenants"
    assert body["results"][0]["logger"] == "tests.task"

    only_second = logs(tenant_api, execution, attempt=2).json()["results"]
    assert [line["message"] for line in only_second] == ["starting again", "charged"]
    errors = logs(tenant_api, execution, level="warning").json()["results"]
    assert [line["message"] for line in errors] == ["charging failed"]
    found = logs(tenant_api, execution, q="card").json()["results"]
    assert [line["message"] for line in found] == ["charging the card", "charging failed"]
    later = logs(tenant_api, execution,
                 after=(datetime.now(UTC) + timedelta(hours=1)).isoformat()).json()
    assert later["count"] == 0

    detail = tenant_api.get(f"/api/v1/executions/{execution.execution_id}/").json()
    assert detail["logs_url"] == (
        f"http://testserver/api/v1/executions/{execution.execution_id}/logs/")


def test_pages_follow_one_another_and_follow_returns_only_newer_lines(
        spool, log_stream, search_client, tenant_api, tenant):
    execution = make_execution(tenant)
    run_attempt(execution, 1, *[f"line {i}" for i in range(5)])
    ship(spool, log_stream, search_client)
    seen, url = [], f"/api/v1/executions/{execution.execution_id}/logs/?page_size=2"
    while url:
        page = tenant_api.get(url).json()
        seen += [line["message"] for line in page["results"]]
        follow, url = page["follow"], page["next"]
    assert seen == [f"line {i}" for i in range(5)]
    assert tenant_api.get(follow).json()["results"] == []
    run_attempt(execution, 2, "a later attempt's line")
    ship(spool, log_stream, search_client)
    assert [line["message"] for line in tenant_api.get(follow).json()["results"]] == [
        "a later attempt's line"]


def test_another_tenant_can_neither_read_the_lines_nor_have_its_own_mixed_in(
        spool, log_stream, search_client, tenant_api, other_api, tenant, other_tenant):
    execution = make_execution(tenant)
    run_attempt(execution, 1, "acme's secret")
    # A line claiming the same execution under another tenant (a crafted document): the
    # tenant's own filter keeps it out of the owner's answer.
    stolen = SimpleNamespace(tenant_id=other_tenant.tenant_id, job_id=execution.job_id,
                             execution_id=execution.execution_id)
    run_attempt(stolen, 1, "globex's line")
    ship(spool, log_stream, search_client)

    assert logs(other_api, execution).status_code == 404
    assert other_api.get(f"/api/v1/executions/{execution.execution_id}/").status_code == 404
    own = logs(tenant_api, execution).json()["results"]
    assert [line["message"] for line in own] == ["acme's secret"]


def test_bad_filters_are_refused_naming_each_parameter(tenant_api, tenant, log_stream):
    execution = make_execution(tenant)
    answer = logs(tenant_api, execution, attempt="0", level="loud", cursor="nope",
                  after="yesterday", colour="red")
    assert answer.status_code == 400
    assert set(answer.json()) >= {"attempt", "level", "cursor", "after", "colour"}
    assert tenant_api.get("/api/v1/executions/not-a-uuid/logs/").status_code == 404


def test_a_batch_sent_again_after_a_crash_and_a_rollover_creates_no_duplicate(
        spool, log_stream, search_client, tenant):
    execution = make_execution(tenant)
    run_attempt(execution, 1, *[f"line {i}" for i in range(20)])
    query = {"term": {"chrono.execution_id": str(execution.execution_id)}}
    offsets = {path: path.read_bytes() for path in spool.glob("*.ndjson")}
    assert ship(spool, log_stream, search_client) == 20
    assert search_client.count(log_stream.name, query) == 20

    # Killed after its _bulk, before its commit: the segment's offset is back where it was.
    for path in offsets:
        path.with_name(path.name + OFFSET_SUFFIX).unlink()
    again = shipper_of(spool, log_stream)
    assert again.ship_once().already_indexed == 20
    search_client.refresh(log_stream.name)
    assert search_client.count(log_stream.name, query) == 20

    for path in offsets:
        path.with_name(path.name + OFFSET_SUFFIX).unlink()
    search_client.rollover(log_stream.name)  # ILM/ISM's daily rollover, between the two sends
    after_rollover = shipper_of(spool, log_stream)  # starts in doubt: looks the ids up first
    report = after_rollover.ship_once()
    assert (report.already_indexed, report.created) == (20, 0)
    search_client.refresh(log_stream.name)
    assert search_client.count(log_stream.name, query) == 20

    # What the lookup prevents: the same re-send, trusted to create alone, doubles every line.
    for path in offsets:
        path.with_name(path.name + OFFSET_SUFFIX).unlink()
    trusting = shipper_of(spool, log_stream)
    trusting.in_doubt = False
    assert trusting.ship_once().created == 20
    search_client.refresh(log_stream.name)
    assert search_client.count(log_stream.name, query) == 40


def test_lines_the_engine_did_not_take_stay_in_the_spool_until_it_does(
        spool, log_stream, search_client, tenant):
    execution = make_execution(tenant)
    run_attempt(execution, 1, "kept through an outage")
    down = SearchClient("http://127.0.0.1:9", connect_timeout_s=0.5)  # nothing listens
    with pytest.raises(SearchUnavailable):
        shipper_of(spool, log_stream, client=down).ship_once()
    assert not list(spool.glob(f"*{OFFSET_SUFFIX}")), "nothing committed"
    assert ship(spool, log_stream, search_client) == 1
    query = {"term": {"chrono.execution_id": str(execution.execution_id)}}
    assert search_client.count(log_stream.name, query) == 1
    assert shipper_of(spool, log_stream).reader.pending_bytes() == 0


def test_the_execution_admin_page_shows_its_lines_with_their_attempt(
        spool, log_stream, search_client, tenant, other_tenant, redis_client):
    execution = make_execution(tenant)
    run_attempt(execution, 1, "first attempt's line", fail=True)
    run_attempt(execution, 2, "second attempt's line")
    ship(spool, log_stream, search_client)
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="x"))
    url = f"/admin/scheduler/execution/{execution.execution_id}/change/"
    page = staff.get(url).content.decode()
    assert 'id="execution-logs"' in page
    assert "first attempt&#x27;s line" in page and "second attempt&#x27;s line" in page
    assert "card declined" in page  # the failure's traceback, for platform staff
    second_only = staff.get(url, {"log_attempt": "2"}).content.decode()
    assert "second attempt&#x27;s line" in second_only
    assert "first attempt&#x27;s line" not in second_only
    refused = staff.get(url, {"log_level": "loud"}).content.decode()
    assert "log_level" in refused

    # A tenant's staff see their execution's lines, the failure's type and message, not its
    # stack trace (paths of the servers, Chrono's frames); another tenant's staff see nothing.
    own_staff = Client()
    user = User.objects.create_user("acme-ops", password="x", is_staff=True)
    add_member(user, tenant, StaffRole.VIEWER)
    own_staff.force_login(user)
    page = own_staff.get(url).content.decode()
    assert "first attempt&#x27;s line" in page and "charging failed" in page
    assert "Traceback" not in page
    assert "Traceback" in staff.get(url).content.decode()
    stranger = Client()
    user = User.objects.create_user("globex-ops", password="x", is_staff=True)
    add_member(user, other_tenant, StaffRole.ADMIN)
    stranger.force_login(user)
    answer = stranger.get(url)
    assert answer.status_code in (302, 404)
    assert "first attempt" not in answer.content.decode()


def test_a_shipper_is_in_doubt_at_its_start_only_after_an_unclean_stop_with_lines_pending(
        spool, log_stream, search_client, tenant):
    execution = make_execution(tenant)
    run_attempt(execution, 1, "shipped before a clean stop")
    first = shipper_of(spool, log_stream)
    assert first.in_doubt, "a shipper starts in doubt: its predecessor may have died"
    runner = threading.Thread(target=first.run)
    runner.start()
    query = {"term": {"chrono.execution_id": str(execution.execution_id)}}

    def shipped() -> bool:
        search_client.refresh(log_stream.name)
        return search_client.count(log_stream.name, query) == 1

    assert wait_until(shipped, timeout_s=30)
    first.stop()
    runner.join(10)
    second = shipper_of(spool, log_stream)
    assert second._hold_lock() and not second.in_doubt
    second._release_lock()
    # No clean stop since (as after a kill), and lines not committed: in doubt again.
    run_attempt(execution, 2, "pending at the next start")
    killed = shipper_of(spool, log_stream)
    assert killed._hold_lock() and killed.in_doubt
    killed._release_lock()
    # With nothing pending nothing a predecessor sent can be in doubt.
    assert ship(spool, log_stream, search_client) == 1
    empty = shipper_of(spool, log_stream)
    assert empty._hold_lock() and not empty.in_doubt
    empty._release_lock()


# -- a tenant's lines across its executions: GET /api/v1/logs/ ----------------------------------


def make_execution_of(job, tenant, status=ExecutionStatus.SUCCEEDED) -> Execution:
    return Execution.objects.create(job=job, tenant=tenant, scheduled_for=datetime.now(UTC),
                                    status=status, attempt=1, worker_id="w1@it")


def search(api_client, **params):
    return api_client.get("/api/v1/logs/", params)


def sort_key(line):
    return (line["timestamp"], line["execution_id"], line["attempt"], line["sequence"])


def test_a_tenants_lines_are_searched_across_its_executions_by_job_execution_level_time_and_text(
        spool, log_stream, search_client, tenant_api, other_api, tenant, other_tenant):
    billing = api.schedule_once("tests.billing", tenant=tenant, delay=timedelta(seconds=600))
    reports = api.schedule_once("tests.reports", tenant=tenant, delay=timedelta(seconds=600))
    first, second = make_execution_of(billing, tenant), make_execution_of(billing, tenant)
    report = make_execution_of(reports, tenant)
    started = datetime.now(UTC)
    run_attempt(first, 1, "charging card 4242", fail=True)  # + "charging failed", an error
    run_attempt(second, 1, "charging card 1111", "charged")
    run_attempt(report, 1, "report of the day")
    theirs = make_execution(other_tenant)
    run_attempt(theirs, 1, "globex charging card 9999")
    assert ship(spool, log_stream, search_client) == 6

    everything = search(tenant_api)
    assert everything.status_code == 200, everything.json()
    body = everything.json()
    assert (body["count"], body["count_is_exact"], body["next"]) == (5, True, None)
    lines = body["results"]
    assert {line["message"] for line in lines} == {
        "charging card 4242", "charging failed", "charging card 1111", "charged",
        "report of the day"}
    assert [sort_key(line) for line in lines] == sorted(map(sort_key, lines), reverse=True)
    failed = next(line for line in lines if line["message"] == "charging failed")
    assert failed["execution_id"] == str(first.execution_id)
    assert failed["job_id"] == str(billing.job_id) and failed["job_type"] == "tests.noop"
    assert failed["error"] == {"type": "builtins.ValueError", "message": "card declined"}

    oldest_first = search(tenant_api, order="asc").json()["results"]
    assert [sort_key(line) for line in oldest_first] == sorted(map(sort_key, lines))

    def messages(**params) -> set[str]:
        answer = search(tenant_api, **params)
        assert answer.status_code == 200, answer.json()
        return {line["message"] for line in answer.json()["results"]}

    assert messages(job=str(reports.job_id)) == {"report of the day"}
    assert messages(execution=str(second.execution_id)) == {"charging card 1111", "charged"}
    assert messages(level="error") == {"charging failed"}
    assert messages(q="card") == {"charging card 4242", "charging card 1111",
                                  "charging failed"}  # its error: "card declined"
    assert messages(q="card", job=str(billing.job_id), level="error") == {"charging failed"}
    assert messages(q="4242 | 1111") == {"charging card 4242", "charging card 1111"}
    assert messages(q="declined") == {"charging failed"}  # the error's message
    assert messages(after=started.isoformat(),
                    before=(datetime.now(UTC) + timedelta(minutes=1)).isoformat()) == {
        line["message"] for line in lines}
    assert messages(after=(datetime.now(UTC) + timedelta(hours=1)).isoformat()) == set()
    assert messages(before=(started - timedelta(hours=1)).isoformat()) == set()

    seen, url = [], "/api/v1/logs/?page_size=2&order=asc"
    while url:
        page = tenant_api.get(url).json()
        assert len(page["results"]) <= 2
        seen += page["results"]
        url = page["next"]
    assert seen == oldest_first

    # The other tenant finds its own line only, and nothing by this tenant's ids.
    assert {line["message"] for line in search(other_api).json()["results"]} == {
        "globex charging card 9999"}
    for params in ({"job": str(billing.job_id)}, {"execution": str(first.execution_id)}):
        answer = search(other_api, **params)
        assert answer.status_code == 200 and answer.json()["count"] == 0, params
    assert "globex" not in str(search(tenant_api, q="charging").json())


def test_a_line_claiming_a_tenants_execution_under_another_tenant_is_never_in_its_search(
        spool, log_stream, search_client, tenant_api, other_api, tenant, other_tenant):
    execution = make_execution(tenant)
    run_attempt(execution, 1, "acme's own")
    forged = SimpleNamespace(tenant_id=other_tenant.tenant_id, job_id=execution.job_id,
                             execution_id=execution.execution_id)
    run_attempt(forged, 2, "globex's forged line")
    ship(spool, log_stream, search_client)
    own = search(tenant_api, execution=str(execution.execution_id)).json()["results"]
    assert [line["message"] for line in own] == ["acme's own"]
    other = search(other_api, execution=str(execution.execution_id)).json()["results"]
    assert [line["message"] for line in other] == ["globex's forged line"]


def test_bad_search_input_is_refused_naming_each_parameter(tenant_api, log_stream):
    answer = search(tenant_api, level="loud", after="yesterday", job="42", order="sideways",
                    cursor="nope", page_size="0", colour="red")
    assert answer.status_code == 400
    assert set(answer.json()) == {"level", "after", "job", "order", "cursor", "page_size",
                                  "colour"}
    backwards = search(tenant_api, after="2026-12-02T00:00:00Z", before="2026-12-01T00:00:00Z")
    assert backwards.status_code == 400 and set(backwards.json()) == {"before"}
    # The per-execution endpoint's cursor (attempt, sequence) is not a search's.
    per_execution = "WzIsNF0"
    assert search(tenant_api, cursor=per_execution).status_code == 400
    assert APIClient().get("/api/v1/logs/").status_code == 401


def test_the_log_search_is_in_the_openapi_schema(staff_api):
    schema = staff_api.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/logs/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {
        "job", "execution", "level", "q", "after", "before", "order", "page_size", "cursor"}
    assert set(operation["responses"]) >= {"200", "503"}


# -- the admin page following a running execution ------------------------------------------------


def test_the_execution_pages_logs_endpoint_gives_the_lines_after_its_cursor_while_it_runs(
        spool, log_stream, search_client, tenant, other_tenant, redis_client):
    job = api.schedule_once("tests.noop", tenant=tenant, delay=timedelta(seconds=600))
    execution = make_execution_of(job, tenant, status=ExecutionStatus.RUNNING)
    running = log_capture.AttemptLog(
        tenant_id=str(tenant.tenant_id), job_id=str(job.job_id),
        execution_id=str(execution.execution_id), attempt=1, worker_id="w1@it",
        job_type="tests.noop")

    def logs_on(message: str, fail: bool = False) -> None:
        with log_capture.capturing(running):
            task_log.info(message)
            if fail:
                try:
                    raise ValueError("card declined")
                except ValueError:
                    task_log.exception("charging failed")
        log_capture.installed().buffer.flush()
        ship(spool, log_stream, search_client)

    logs_on("before the page", fail=True)
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="x"))
    html = staff.get(f"/admin/scheduler/execution/{execution.execution_id}/change/")
    page = html.content.decode()
    assert 'data-live="true"' in page and "scheduler/execution_logs.js" in page
    # No inline script: a Content-Security-Policy of script-src 'self' lets the page work.
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", page) == []
    follow_url = re.search(r'data-follow-url="([^"]+)"', page).group(1)
    cursor = re.search(r'data-cursor="([^"]*)"', page).group(1)
    assert cursor, "the cursor after the lines the page shows"

    nothing_new = staff.get(follow_url, {"log_cursor": cursor}).json()
    assert (nothing_new["lines"], nothing_new["live"], nothing_new["status"]) == (
        [], True, "RUNNING")
    assert nothing_new["follow"] == cursor
    logs_on("after the page")  # the attempt logs on
    later = staff.get(follow_url, {"log_cursor": cursor}).json()
    assert [line["message"] for line in later["lines"]] == ["after the page"]
    assert later["follow"] != cursor and later["total"] == 3

    # A tenant's staff get their lines without stack traces; another tenant's get a 404.
    viewer = Client()
    user = User.objects.create_user("acme-ops", password="x", is_staff=True)
    add_member(user, tenant, StaffRole.VIEWER)
    viewer.force_login(user)
    theirs = viewer.get(follow_url).json()["lines"]
    assert theirs[1]["message"] == "charging failed" and "stack_trace" not in theirs[1]["error"]
    assert "stack_trace" in staff.get(follow_url).json()["lines"][1]["error"]
    stranger = Client()
    user = User.objects.create_user("globex-ops", password="x", is_staff=True)
    add_member(user, other_tenant, StaffRole.ADMIN)
    stranger.force_login(user)
    assert stranger.get(follow_url).status_code == 404
    assert staff.get(follow_url, {"log_level": "loud"}).status_code == 400

    # Ended a moment ago: followed a little longer (its last lines are on their way); ended
    # long ago: the page does not follow it.
    Execution.objects.filter(pk=execution.pk).update(status=ExecutionStatus.SUCCEEDED,
                                                     finished_at=datetime.now(UTC))
    assert staff.get(follow_url).json()["live"] is True
    Execution.objects.filter(pk=execution.pk).update(
        finished_at=datetime.now(UTC) - timedelta(minutes=5))
    assert staff.get(follow_url).json()["live"] is False
    ended = staff.get(f"/admin/scheduler/execution/{execution.execution_id}/change/")
    assert 'data-live="false"' in ended.content.decode()
