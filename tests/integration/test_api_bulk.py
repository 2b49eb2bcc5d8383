"""Bulk ingest: a JSON array or NDJSON, validated item by item, COPY'd, timers added in batches."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduler.clock import datetime_to_ms
from scheduler.models import Job, JobStatus
from scheduler.timers import timer_store

pytestmark = pytest.mark.django_db

BULK = "/api/v1/jobs/bulk/"


def test_every_valid_item_becomes_a_job_with_its_timer_in_request_order(
    tenant_api, django_capture_on_commit_callbacks
):
    sent_at = datetime.now(UTC)
    run_at = sent_at.replace(microsecond=0) + timedelta(hours=3)
    items = [
        {"job_type": "mail.send", "delay_ms": 60_000, "args": [1], "kwargs": {"to": "a@b"},
         "queue": "mail", "name": "first", "max_retries": 2},
        {"job_type": "mail.send", "run_at": run_at.isoformat()},
        {"job_type": "reports.daily", "cron_expression": "0 6 * * *", "timezone": "Asia/Tokyo"},
    ]
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post_json(BULK, items)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["created"], body["failed"], body["errors"]) == (3, 0, [])
    first, second, third = (Job.objects.get(job_id=job_id) for job_id in body["ids"])
    assert (first.name, first.args, first.kwargs, first.queue, first.max_retries) == (
        "first", [1], {"to": "a@b"}, "mail", 2)
    assert (first.status, first.tenant_id, first.cron_expression) == (
        JobStatus.ACTIVE, tenant_api.tenant.tenant_id, None)
    assert second.next_run_at == run_at and second.queue == "chrono"
    assert (third.cron_expression, third.timezone) == ("0 6 * * *", "Asia/Tokyo")
    # created_at and updated_at come from the database's default in a COPY.
    assert sent_at - timedelta(seconds=1) < first.created_at == first.updated_at < datetime.now(UTC)
    tokyo = third.next_run_at.astimezone(ZoneInfo("Asia/Tokyo"))
    assert (tokyo.hour, tokyo.minute) == (6, 0)
    for job in (first, second, third):
        assert timer_store().fire_time_of(str(job.job_id)) == datetime_to_ms(job.next_run_at)
    # A job made by COPY reads like any other through the API.
    detail = tenant_api.get(f"/api/v1/jobs/{third.job_id}/").json()
    assert len(detail["next_fire_times"]) == 5


def test_invalid_items_are_reported_by_index_and_field_and_valid_ones_are_created(tenant_api):
    items = [
        {"job_type": "ok", "delay_ms": 10},
        {"job_type": "bad", "cron_expression": "0 0 31 2 *"},
        {"job_type": "ok", "delay_ms": 20},
        {"job_type": "bad", "delay_ms": -1, "colour": "red"},
        "not an object",
    ]
    response = tenant_api.post_json(BULK, items)
    assert response.status_code == 200
    body = response.json()
    assert (body["created"], body["failed"]) == (2, 3)
    assert body["ids"][1] is None and body["ids"][3] is None and body["ids"][4] is None
    assert Job.objects.filter(job_id__in=[body["ids"][0], body["ids"][2]]).count() == 2
    assert body["errors"] == [
        {"index": 1, "field": "cron_expression", "message": (
            "day-of-month 31 never occurs in February, so this schedule never fires; choose a "
            "day from 1 to 29 or add a month that has it")},
        {"index": 3, "field": "colour", "message": (
            "Unknown field; the fields are: job_type, name, queue, args, kwargs, max_retries, "
            "run_at, delay_ms, cron_expression, interval_ms, interval_anchor, timezone, "
            "retry_policy, soft_timeout_ms, hard_timeout_ms, overlap_policy, misfire_policy, "
            "misfire_fire_all_limit, jitter_ms, calendars.")},
        {"index": 3, "field": "delay_ms", "message": (
            "Is negative (-1); use 0 or more milliseconds from now.")},
        {"index": 4, "field": "non_field_errors", "message": (
            "A job is a JSON object, got a string.")},
    ]


def test_when_no_item_is_valid_nothing_is_written_and_the_answer_is_400(tenant_api):
    response = tenant_api.post_json(BULK, [{"job_type": "x"}])
    assert response.status_code == 400
    assert response.json()["created"] == 0
    assert response.json()["ids"] == [None]
    assert not Job.objects.exists()


def test_ndjson_lines_are_items_and_a_broken_line_is_that_items_error(
    tenant_api, django_capture_on_commit_callbacks
):
    lines = [json.dumps({"job_type": "a", "delay_ms": 5}), "", "{broken",
             json.dumps({"job_type": "b", "cron_expression": "@hourly"})]
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post(BULK, "\n".join(lines).encode(),
                                   content_type="application/x-ndjson")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["created"] == 2 and body["ids"][1] is None
    assert body["errors"][0]["index"] == 1
    assert body["errors"][0]["message"].startswith("line 3 is not valid JSON: ")
    assert timer_store().fire_time_of(body["ids"][2]) is not None


def test_the_path_without_a_trailing_slash_works_as_documented(tenant_api):
    response = tenant_api.post_json("/api/v1/jobs/bulk", [{"job_type": "a", "delay_ms": 5}])
    assert response.status_code == 201


def test_a_body_that_is_not_an_array_or_empty_is_400(tenant_api):
    response = tenant_api.post_json(BULK, {"job_type": "a", "delay_ms": 5})
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": [
        "Send a JSON array of jobs, or NDJSON (one job a line) with Content-Type "
        "application/x-ndjson."]}
    response = tenant_api.post_json(BULK, [])
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["The request holds no job; send 1 or more."]}


def test_malformed_json_array_is_400(tenant_api):
    response = tenant_api.post(BULK, b'[{"job_type": "a"', content_type="application/json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("Malformed JSON: ")


def test_a_large_batch_lands_whole(tenant_api, django_capture_on_commit_callbacks):
    items = [{"job_type": "tests.noop", "delay_ms": 1000 + i, "args": [i]} for i in range(5000)]
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post_json(BULK, items)
    assert response.status_code == 201
    ids = response.json()["ids"]
    assert Job.objects.filter(tenant=tenant_api.tenant).count() == 5000
    assert timer_store().pending_count() == 5000
    job = Job.objects.get(job_id=ids[4321])
    assert job.args == [4321]
    assert datetime_to_ms(job.next_run_at) == timer_store().fire_time_of(ids[4321])


def test_text_that_needs_escaping_in_copy_survives(tenant_api):
    # A name holds no control character; the payload may.
    name = "back\\slash \\N, quote\" and ünïcødé"
    tricky = f"tab\there, newline\nthere, {name}"
    response = tenant_api.post_json(BULK, [{"job_type": "a", "delay_ms": 5, "name": name,
                                            "kwargs": {"text": tricky, "n": None}}])
    assert response.status_code == 201, response.json()
    job = Job.objects.get(job_id=response.json()["ids"][0])
    assert job.name == name and job.kwargs == {"text": tricky, "n": None}


def test_bulk_job_ids_are_distinct_version_4_uuids():
    from scheduler.job_writer import new_job_ids

    ids = new_job_ids(2000)
    parsed = [uuid.UUID(job_id) for job_id in ids]
    assert len(set(ids)) == 2000
    assert {(u.version, u.variant) for u in parsed} == {(4, uuid.RFC_4122)}
    assert [str(u) for u in parsed] == ids


def test_every_created_job_gets_its_audit_row_in_the_same_transaction(tenant_api):
    from search.models import AuditEvent

    response = tenant_api.post_json(BULK, [
        {"job_type": "a", "delay_ms": 5}, {"job_type": "b", "delay_ms": 5},
        {"job_type": "a", "delay_ms": -5}, {"job_type": "a", "delay_ms": 6}])
    ids = [job_id for job_id in response.json()["ids"] if job_id]
    events = AuditEvent.objects.filter(tenant_id=tenant_api.tenant.tenant_id,
                                       action="job.created")
    assert sorted(str(e.job_id) for e in events) == sorted(ids)
    assert {str(e.job_id): e.data["job_type"] for e in events} == {
        ids[0]: "a", ids[1]: "b", ids[2]: "a"}
    assert {e.actor for e in events} == {f"api-key:{tenant_api.full_key.split('_')[1]}"}


def test_an_item_with_a_cron_digit_that_is_not_ascii_fails_alone(
    tenant_api, django_capture_on_commit_callbacks
):
    items = [{"job_type": "ok", "delay_ms": 10},
             {"job_type": "bad", "cron_expression": "² * * * *"},
             {"job_type": "bad", "cron_expression": "٣ * * * *"},
             {"job_type": "ok", "cron_expression": "3 * * * *"}]
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post_json(BULK, items)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["created"], body["failed"]) == (2, 2)
    assert [error["index"] for error in body["errors"]] == [1, 2]
    assert {error["field"] for error in body["errors"]} == {"cron_expression"}
    assert set(Job.objects.values_list("cron_expression", flat=True)) == {None, "3 * * * *"}


def test_an_item_with_a_control_character_fails_alone_with_the_message_of_a_single_create(
    tenant_api,
):
    from tests.integration.test_api_validation import CONTROL_CHARACTER_CASES

    items = [{"job_type": "tests.noop", **fields} for fields, _, _ in CONTROL_CHARACTER_CASES]
    items.insert(3, {"job_type": "ok", "delay_ms": 10, "name": "tab-free"})
    response = tenant_api.post_json(BULK, items)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["created"], body["failed"]) == (1, len(CONTROL_CHARACTER_CASES))
    expected = [{"index": index + (index >= 3), "field": field, "message": message}
                for index, (_, field, message) in enumerate(CONTROL_CHARACTER_CASES)]
    assert body["errors"] == expected
    assert list(Job.objects.values_list("name", flat=True)) == ["tab-free"]


def test_the_payload_limit_of_a_bulk_item_is_the_single_creates(tenant_api):
    from tests.integration.test_api_validation import LIMIT, payload_of

    response = tenant_api.post_json(BULK, [
        {"job_type": "a", "delay_ms": 5, "kwargs": payload_of(LIMIT)},
        {"job_type": "a", "delay_ms": 5, "kwargs": payload_of(LIMIT + 1)},
    ])
    assert response.status_code == 200
    assert response.json()["errors"] == [{"index": 1, "field": "args", "message": (
        f"args and kwargs are {LIMIT + 1} bytes as JSON; the limit is {LIMIT} bytes. Pass a "
        "reference (an id, a URL) instead of the data itself.")}]


@pytest.mark.parametrize("content_type", ["application/json", "application/x-ndjson"])
def test_an_item_with_an_integer_outside_64_bits_fails_alone(tenant_api, content_type):
    items = [b'{"job_type": "a", "delay_ms": 5, "args": [9223372036854775807]}',
             b'{"job_type": "a", "delay_ms": 5, "kwargs": {"id": 18446744073709551616}}',
             b'{"job_type": "a", "delay_ms": 5, "args": ["12345678901234567890123"]}']
    body = (b"[" + b",".join(items) + b"]" if content_type == "application/json"
            else b"\n".join(items))
    response = tenant_api.post(BULK, body, content_type=content_type)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["errors"] == [{"index": 1, "field": "kwargs", "message": (
        "kwargs.id is 18446744073709551616, outside the signed 64-bit integer range "
        "(-9223372036854775808 to 9223372036854775807); send it as a string.")}]
    assert sorted(map(str, Job.objects.values_list("args", flat=True))) == [
        "['12345678901234567890123']", "[9223372036854775807]"]
