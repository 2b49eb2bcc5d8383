"""Searching the audit log where people look: ``GET /api/v1/audit/`` and the admin's audit page,
against documents the real indexer put in the real engine."""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from chronocore.config import get_config
from scheduler import api, occurrences
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.executions import finish_execution, start_execution
from scheduler.lifecycle import execution_id_for
from scheduler.models import ExecutionStatus
from search import audit
from tests.integration.audit_support import ship_all
from tests.integration.conftest import platform_staff_user

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = pytest.mark.django_db

AUDIT = "/api/v1/audit/"


def run_job(tenant, *, fail: bool = False, job_type: str = "billing.charge") -> tuple[str, str]:
    """A one-time job created, dispatched, started and finished; (job id, execution id)."""
    job = api.schedule_once(job_type, tenant=tenant, delay=0, by="user:alice")
    fire_ms = datetime_to_ms(job.next_run_at)
    occurrences.load_and_insert([(str(job.job_id), fire_ms)])
    execution_id = str(execution_id_for(str(job.job_id), fire_ms))
    confirmed_ms = now_ms()
    occurrences.record_dispatched([(uuid.UUID(execution_id), fire_ms, confirmed_ms)],
                                  advances=[occurrences.JobAdvance(
                                      str(job.job_id), fire_ms, None, confirmed_ms)])
    started = start_execution(execution_id, attempt=1, worker_id="w1", lease_ttl_ms=60_000)
    if fail:
        finish_execution(started, status=ExecutionStatus.FAILED,
                         error="ValueError: card declined for invoice 77")
    else:
        finish_execution(started, status=ExecutionStatus.SUCCEEDED)
    return str(job.job_id), execution_id


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_a_search_by_job_id_returns_that_jobs_history_in_order(tenant_api, indexer):
    cron = api.schedule_cron("reports.daily", tenant=tenant_api.tenant, cron="0 6 * * *")
    api.pause(cron.job_id, tenant=tenant_api.tenant, by="user:alice")
    api.resume(cron.job_id, tenant=tenant_api.tenant, by="user:bob")
    job_id, execution_id = run_job(tenant_api.tenant)
    run_job(tenant_api.tenant)  # another job's history does not mix in
    ship_all(indexer)

    history = results(tenant_api.get(AUDIT, {"job": job_id, "order": "asc"}))
    assert [d["event"]["action"] for d in history] == [
        "job.created", "execution.dispatched", "job.completed", "execution.started",
        "execution.succeeded",
    ]
    assert {d["chrono"]["job_id"] for d in history} == {job_id}
    assert [d["id"] for d in history] == sorted((d["id"] for d in history), key=int)
    newest_first = results(tenant_api.get(AUDIT, {"job": job_id}))
    assert newest_first == history[::-1]
    by_execution = results(tenant_api.get(AUDIT, {"execution": execution_id, "order": "asc"}))
    assert [d["event"]["action"] for d in by_execution] == [
        "execution.dispatched", "execution.started", "execution.succeeded"]
    cron_history = results(tenant_api.get(AUDIT, {"job": str(cron.job_id), "order": "asc"}))
    assert [(d["event"]["action"], d["chrono"]["actor"]) for d in cron_history] == [
        ("job.created", "system"), ("job.paused", "user:alice"), ("job.resumed", "user:bob")]


def test_tenant_a_never_sees_tenant_b_documents(tenant_api, other_api, indexer):
    mine, _ = run_job(tenant_api.tenant, fail=True)
    theirs, their_execution = run_job(other_api.tenant, fail=True)
    api.cancel(api.schedule_once("x.y", tenant=other_api.tenant, delay=60).job_id,
               tenant=other_api.tenant, by="user:mallory")
    audit.record(audit.WORKER_UP, tenant_id=None, actor="worker:w1", data={"worker_id": "w1"})
    ship_all(indexer)

    other_tenant = str(other_api.tenant.tenant_id)
    for params in (
        {}, {"job": theirs}, {"execution": their_execution}, {"q": "card declined"},
        {"q": f"chrono.tenant_id:{other_tenant}"}, {"q": other_tenant}, {"q": "mallory"},
        {"action": "job.cancelled,worker.up"}, {"outcome": "failure"},
    ):
        response = tenant_api.get(AUDIT, params | {"page_size": 500})
        docs = results(response)
        assert {d["chrono"]["tenant_id"] for d in docs} <= {str(tenant_api.tenant.tenant_id)}, (
            params)
        assert response.json()["count"] == len(docs)
    assert len(results(tenant_api.get(AUDIT, {"job": mine}))) == 5
    assert results(tenant_api.get(AUDIT, {"job": theirs})) == []
    # And the other way round.
    assert results(other_api.get(AUDIT, {"job": mine})) == []
    assert len(results(other_api.get(AUDIT, {"job": theirs}))) == 5


def test_filters_by_action_outcome_time_and_words(tenant_api, indexer):
    ok_job, _ = run_job(tenant_api.tenant, job_type="billing.refund")
    bad_job, bad_execution = run_job(tenant_api.tenant, fail=True)
    ship_all(indexer)

    failures = results(tenant_api.get(AUDIT, {"outcome": "failure"}))
    assert [(d["event"]["action"], d["chrono"]["execution_id"]) for d in failures] == [
        ("execution.failed", bad_execution)]
    assert failures[0]["error"] == {"type": "ValueError", "message": "card declined for invoice 77"}
    finished = results(tenant_api.get(AUDIT, {"action": "execution.succeeded,execution.failed"}))
    assert {d["chrono"]["job_id"] for d in finished} == {ok_job, bad_job}
    repeated = results(tenant_api.get(f"{AUDIT}?action=execution.succeeded&action=job.created"))
    assert sorted(d["event"]["action"] for d in repeated) == [
        "execution.succeeded", "job.created", "job.created"]
    words = results(tenant_api.get(AUDIT, {"q": "invoice 77"}))
    assert [d["chrono"]["job_id"] for d in words] == [bad_job]
    by_type = results(tenant_api.get(AUDIT, {"q": "billing.refund"}))
    assert by_type and {d["chrono"]["job_id"] for d in by_type} == {ok_job}
    now = timezone.now()
    hour = timedelta(hours=1)
    assert len(results(tenant_api.get(AUDIT, {"after": (now - hour).isoformat(),
                                              "before": (now + hour).isoformat()}))) == 10
    assert results(tenant_api.get(AUDIT, {"after": (now + hour).isoformat()})) == []
    assert results(tenant_api.get(AUDIT, {"before": (now - hour).isoformat()})) == []


def test_pages_follow_next_links_without_gaps_or_repeats(tenant_api, indexer):
    job = api.schedule_cron("reports.hourly", tenant=tenant_api.tenant, cron="0 * * * *")
    for _ in range(6):
        api.pause(job.job_id, tenant=tenant_api.tenant)
        api.resume(job.job_id, tenant=tenant_api.tenant)
    ship_all(indexer)

    seen, url, params = [], AUDIT, {"job": str(job.job_id), "page_size": 5, "order": "asc"}
    while url:
        response = tenant_api.get(url, params)
        body = response.json()
        assert body["count"] == 13
        seen += results(response)
        url, params = body["next"], None
    assert len(seen) == 13
    assert len({d["id"] for d in seen}) == 13
    assert [d["event"]["sequence"] for d in seen] == sorted(d["event"]["sequence"] for d in seen)


@pytest.mark.parametrize(("params", "field"), [
    ({"job": "42"}, "job"),
    ({"execution": "not-a-uuid"}, "execution"),
    ({"action": "job.exploded"}, "action"),
    ({"outcome": "maybe"}, "outcome"),
    ({"after": "yesterday"}, "after"),
    ({"after": "2025-01-02T00:00:00Z", "before": "2025-01-01T00:00:00Z"}, "before"),
    ({"order": "sideways"}, "order"),
    ({"page_size": "0"}, "page_size"),
    ({"cursor": "garbage"}, "cursor"),
    ({"tenant": "someone-else"}, "tenant"),
    ({"q": "x" * 501}, "q"),
])
def test_unusable_parameters_are_refused_with_what_to_change(tenant_api, audit_stream, params,
                                                             field):
    response = tenant_api.get(AUDIT, params)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]


def cursor_of(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("cursor", [
    cursor_of("[100000000000000000000000000000, 1]"),  # a huge integer: the engine refuses it
    cursor_of(f"[1700000000000, {2**63}]"),
    cursor_of(f"[{2**63}, 1]"),
    cursor_of("[-1, 1]"),
    cursor_of("[253402300800000, 1]"),  # after 9999-12-31
    cursor_of("[1700000000000]"),
    cursor_of('[1700000000000, "1"]'),
    cursor_of("[1700000000000, 1.5]"),
    cursor_of("[true, 1]"),
    cursor_of('{"a": 1}'),
    "W1sxNzAwMDAwMDAwMDAwLCAxXQ!!",  # not base64 (the decoder would skip the !)
    "////",  # base64 of bytes that are not UTF-8
    "é",
    "A" * 10_000,
])
def test_a_cursor_this_api_did_not_give_out_is_400_not_503(tenant_api, audit_stream, cursor):
    response = tenant_api.get(AUDIT, {"cursor": cursor})
    assert response.status_code == 400, response.content
    assert response.json() == {"cursor": [
        "Invalid cursor; use the cursor in the next link of the previous page, unchanged."]}


def test_a_cursor_from_a_page_still_works(tenant_api, indexer):
    for _ in range(2):
        run_job(tenant_api.tenant)
    ship_all(indexer)
    first = tenant_api.get(AUDIT, {"page_size": 2}).json()
    assert first["next"]
    assert tenant_api.get(first["next"]).status_code == 200


def test_only_a_tenant_api_key_may_search(client, staff_api, audit_stream):
    assert client.get(AUDIT).status_code in (401, 403)
    assert staff_api.get(AUDIT).status_code == 403  # staff use the admin page


def test_an_engine_that_does_not_answer_gives_503_with_what_happens_meanwhile(
    tenant_api, audit_stream, monkeypatch
):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("SEARCH_URL", f"http://127.0.0.1:{port}")
    get_config.cache_clear()
    try:
        response = tenant_api.get(AUDIT)
    finally:
        monkeypatch.undo()
        get_config.cache_clear()
    assert response.status_code == 503
    assert "kept in PostgreSQL" in response.json()["detail"]


def test_the_search_is_in_the_openapi_schema(staff_api):
    schema = staff_api.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/audit/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {
        "q", "job", "execution", "action", "outcome", "after", "before", "cursor"}


def test_the_admin_page_shows_results_and_counts_by_action_and_outcome(
    tenant, other_tenant, indexer, client
):
    job_id, _ = run_job(tenant, fail=True)
    run_job(other_tenant)
    ship_all(indexer)
    client.force_login(platform_staff_user("ops"))

    page = client.get("/admin/audit/", {"job": job_id})
    assert page.status_code == 200
    html = page.content.decode()
    assert [r["job_id"] for r in page.context["rows"]] == [job_id] * 5  # its five events
    assert html.count(f'<a href="?job={job_id}&amp;order=asc">') == 5
    counts = page.context["action_counts"]
    assert dict(counts) == {"job.created": 1, "execution.dispatched": 1, "job.completed": 1,
                            "execution.started": 1, "execution.failed": 1}
    assert dict(page.context["outcome_counts"]) == {"success": 4, "failure": 1}
    assert "card declined" in html

    everyone = client.get("/admin/audit/", {"action": "job.created"})
    assert {r["tenant"] for r in everyone.context["rows"]} >= {tenant.slug, other_tenant.slug}
    one = client.get("/admin/audit/", {"action": "job.created", "tenant": other_tenant.slug})
    assert {r["tenant"] for r in one.context["rows"]} == {other_tenant.slug}
    bad = client.get("/admin/audit/", {"tenant": "nobody"})
    assert bad.status_code == 200 and "No tenant with the slug" in bad.content.decode()


def test_the_admin_page_is_for_staff_only(client, django_user_model, audit_stream):
    assert client.get("/admin/audit/").status_code == 302  # to the login page
    user = django_user_model.objects.create_user("someone", password="x", is_staff=False)
    client.force_login(user)
    response = client.get("/admin/audit/")
    assert response.status_code == 302 and "/login/" in response["Location"]
