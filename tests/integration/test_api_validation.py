"""Bad input gets 400 (413 for sizes) with a message per field that says what to change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.models import Job

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def create(api, **fields):
    return api.post_json(JOBS, {"job_type": "tests.noop"} | fields)


def test_an_invalid_cron_field_is_named_in_the_message(tenant_api):
    response = create(tenant_api, cron_expression="61 * * * *")
    assert response.status_code == 400
    assert response.json() == {
        "cron_expression": ["minute field '61' is out of range 0-59"]}


def test_a_cron_expression_with_the_wrong_number_of_fields_says_how_many(tenant_api):
    response = create(tenant_api, cron_expression="* * *")
    assert response.status_code == 400
    assert response.json() == {"cron_expression": [
        "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds "
        "first, got 3"]}


def test_an_unknown_time_zone_suggests_the_closest(tenant_api):
    response = create(tenant_api, cron_expression="0 9 * * *", timezone="Europe/Pari")
    assert response.status_code == 400
    assert response.json() == {"timezone": [
        "unknown time zone 'Europe/Pari'; use an IANA name such as 'Europe/Paris' "
        "(did you mean 'Europe/Paris'?)"]}


def test_a_cron_expression_that_never_fires_is_refused(tenant_api):
    response = create(tenant_api, cron_expression="0 0 30 2 *")
    assert response.status_code == 400
    assert response.json() == {"cron_expression": [
        "day-of-month 30 never occurs in February, so this schedule never fires; choose a day "
        "from 1 to 29 or add a month that has it"]}


def test_run_at_in_the_past_beyond_the_grace_is_refused(tenant_api):
    response = create(tenant_api, run_at=(datetime.now(UTC) - timedelta(minutes=10)).isoformat())
    assert response.status_code == 400
    assert response.json() == {"run_at": [
        "Is 10 min in the past (at most 5000 ms is allowed); give a future time, or "
        "delay_ms=0 to run now."]}


def test_run_at_just_past_within_the_grace_runs_at_once(tenant_api):
    response = create(tenant_api, run_at=(datetime.now(UTC) - timedelta(seconds=1)).isoformat())
    assert response.status_code == 201, response.json()


def test_run_at_without_an_offset_is_refused(tenant_api):
    response = create(tenant_api, run_at="2099-01-01T09:00:00")
    assert response.status_code == 400
    assert response.json() == {"run_at": [
        "'2099-01-01T09:00:00' has no UTC offset; use an ISO 8601 time with a UTC offset such "
        "as 2030-01-01T09:00:00Z."]}


def test_run_at_that_is_not_a_time_is_refused(tenant_api):
    response = create(tenant_api, run_at="next tuesday")
    assert response.status_code == 400
    assert response.json() == {"run_at": [
        "'next tuesday' is not a time; use an ISO 8601 time with a UTC offset such as "
        "2030-01-01T09:00:00Z."]}


def test_a_negative_delay_is_refused(tenant_api):
    response = create(tenant_api, delay_ms=-5)
    assert response.status_code == 400
    assert response.json() == {"delay_ms": [
        "Is negative (-5); use 0 or more milliseconds from now."]}


def test_a_fractional_delay_is_refused(tenant_api):
    response = create(tenant_api, delay_ms=1.5)
    assert response.status_code == 400
    assert response.json() == {"delay_ms": [
        "Must be a whole number of milliseconds (0 or more), got a number."]}


def test_malformed_json_is_refused_with_where_it_broke(tenant_api):
    response = tenant_api.post(JOBS, b'{"job_type": "x", ', content_type="application/json")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail.startswith("Malformed JSON: ") and "line 1 column" in detail
    assert detail.endswith("Send a valid JSON document.")


def test_unknown_fields_are_refused_with_a_suggestion(tenant_api):
    response = create(tenant_api, delay_ms=0, run_time="2099-01-01T00:00:00Z", priority=3)
    assert response.status_code == 400
    fields = ("job_type, name, queue, args, kwargs, max_retries, run_at, delay_ms, "
              "cron_expression, interval_ms, interval_anchor, timezone, retry_policy, "
              "soft_timeout_ms, hard_timeout_ms, "
              "overlap_policy, misfire_policy, misfire_fire_all_limit, jitter_ms, calendars")
    assert response.json() == {
        "run_time": [f"Unknown field; did you mean 'run_at'? the fields are: {fields}."],
        "priority": [f"Unknown field; the fields are: {fields}."],
    }
    assert not Job.objects.exists()


def test_no_schedule_or_two_schedules_are_refused(tenant_api):
    response = create(tenant_api)
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": [
        "Give exactly one of run_at (ISO 8601 time with offset), delay_ms (milliseconds from "
        "now), cron_expression or interval_ms; got none."]}
    response = create(tenant_api, delay_ms=5, cron_expression="* * * * *")
    assert response.status_code == 400
    assert response.json() == {"cron_expression": [
        "Give exactly one of run_at (ISO 8601 time with offset), delay_ms (milliseconds from "
        "now), cron_expression or interval_ms; got delay_ms and cron_expression."]}


def test_a_time_zone_for_a_one_time_job_is_refused(tenant_api):
    response = create(tenant_api, delay_ms=5, timezone="Europe/Paris")
    assert response.status_code == 400
    assert response.json() == {"timezone": [
        "timezone applies to cron_expression only; write run_at with its UTC offset instead "
        "(e.g. 2030-01-01T09:00:00+01:00)."]}


def test_a_missing_job_type_and_wrong_types_are_all_reported_at_once(tenant_api):
    response = tenant_api.post_json(JOBS, {
        "delay_ms": 5, "args": {"a": 1}, "kwargs": [1], "max_retries": 1000, "queue": "a b"})
    assert response.status_code == 400
    assert response.json() == {
        "job_type": ["This field is required: a Celery task name such as "
                     "'billing.tasks.send_invoice'."],
        "args": ["Must be a JSON array, got an object."],
        "kwargs": ["Must be a JSON object, got an array."],
        "max_retries": ["Is 1000; use a whole number from 0 to 100."],
        "queue": ["'a b' is not valid here; use letters, digits and . _ : - such as "
                  "'reports'."],
    }


def test_a_body_that_is_not_an_object_is_refused(tenant_api):
    response = tenant_api.post_json(JOBS, [1, 2])
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["A job is a JSON object, got an array."]}


def test_a_nul_character_in_the_payload_is_refused(tenant_api):
    response = create(tenant_api, delay_ms=0, kwargs={"text": "a\u0000b"})
    assert response.status_code == 400
    assert response.json() == {"kwargs": [
        "kwargs.text contains a NUL character (\\u0000), which cannot be stored; remove it or "
        "encode the data (e.g. base64)."]}


def test_a_payload_over_the_limit_is_413_with_the_sizes(tenant_api, chrono_config):
    chrono_config(max_payload_bytes=2048)
    response = create(tenant_api, delay_ms=0, args=["x" * 3000])
    assert response.status_code == 413
    assert response.json() == {"args": [
        "args and kwargs are 3006 bytes as JSON; the limit is 2048 bytes. Pass a reference "
        "(an id, a URL) instead of the data itself."]}


def test_a_request_body_over_the_limit_is_413_before_parsing(tenant_api, chrono_config):
    chrono_config(api_max_request_bytes=2048)
    response = tenant_api.post(JOBS, b"[" + b" " * 4000 + b"]", content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {"detail": (
        "The request body is 4002 bytes; this endpoint accepts at most 2048 bytes. Send fewer "
        "jobs per request, or pass references (ids, URLs) instead of large payloads.")}


def test_a_body_that_is_not_json_is_415(tenant_api):
    response = tenant_api.post(JOBS, "job_type=x", content_type="text/plain")
    assert response.status_code == 415
    assert response.json() == {"detail": 'Unsupported media type "text/plain" in request.'}


def test_patch_refuses_run_at_for_a_cron_job_and_cron_for_a_one_time_job(tenant_api):
    cron_job = create(tenant_api, cron_expression="@daily").json()["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{cron_job}/", {
        "run_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()})
    assert response.status_code == 400
    assert response.json() == {"run_at": [
        "This is a cron job: change cron_expression or timezone; run_at is for one-time jobs."]}
    one_time = create(tenant_api, delay_ms=1000).json()["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{one_time}/", {"cron_expression": "@hourly"})
    assert response.status_code == 400
    assert response.json() == {"cron_expression": [
        "This is a one-time job: change run_at; cron_expression and timezone are for cron jobs "
        "(create a cron job instead)."]}


def test_patch_with_an_invalid_cron_or_zone_names_the_field(tenant_api):
    job_id = create(tenant_api, cron_expression="@daily").json()["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"cron_expression": "0 25 * * *"})
    assert response.status_code == 400
    assert response.json() == {"cron_expression": ["hour field '25' is out of range 0-23"]}
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"timezone": "Mars/Olympus"})
    assert response.status_code == 400
    assert response.json() == {"timezone": [
        "unknown time zone 'Mars/Olympus'; use an IANA name such as 'Europe/Paris'"]}


def test_patch_with_nothing_or_unknown_fields_is_refused(tenant_api):
    job_id = create(tenant_api, delay_ms=1000).json()["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {})
    assert response.status_code == 400
    fields = ("run_at, cron_expression, timezone, interval_ms, interval_anchor, max_retries, "
              "retry_policy, soft_timeout_ms, "
              "hard_timeout_ms, overlap_policy, misfire_policy, misfire_fire_all_limit, "
              "jitter_ms, calendars")
    assert response.json() == {"non_field_errors": [f"Nothing to change: give one of {fields}."]}
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"queue": "other"})
    assert response.status_code == 400
    assert response.json() == {"queue": [f"Unknown field; the fields are: {fields}."]}


def test_list_refuses_unknown_parameters_bad_filters_orderings_and_page_sizes(tenant_api):
    response = tenant_api.get(f"{JOBS}?stauts=ACTIVE")
    assert response.status_code == 400
    assert response.json() == {"stauts": [
        "Unknown query parameter; allowed: created_after, created_before, cursor, job_type, "
        "name, next_run_at_after, next_run_at_before, ordering, page_size, queue, status."]}
    response = tenant_api.get(f"{JOBS}?status=RUNNING")
    assert response.status_code == 400
    assert response.json() == {"status": [
        "Select a valid choice. RUNNING is not one of the available choices."]}
    response = tenant_api.get(f"{JOBS}?ordering=next_run_at")
    assert response.status_code == 400
    assert response.json() == {"ordering": [
        "'next_run_at' is not an ordering; use one of created_at, -created_at, updated_at, "
        "-updated_at."]}
    response = tenant_api.get(f"{JOBS}?page_size=501")
    assert response.status_code == 400
    assert response.json() == {"page_size": [
        "'501' is not allowed; use a whole number from 1 to 500."]}
    response = tenant_api.get(f"{JOBS}?created_after=yesterday")
    assert response.status_code == 400
    assert response.json() == {"created_after": ["Enter a valid date/time."]}


def test_a_tampered_cursor_is_404_not_500(tenant_api):
    import base64

    cursor = base64.b64encode(b"p=not-a-time&o=0").decode()
    response = tenant_api.get(f"{JOBS}?cursor={cursor}")
    assert response.status_code == 404
    assert response.json() == {"detail": "Invalid cursor"}


@pytest.mark.parametrize("position", [
    "9999-12-31T23:59:59-23:59",  # after year 9999 in UTC: PostgreSQL refused it, a 500
    "9999-12-31T23:59:59-15:00",
    "0001-01-01T00:00:00+23:59",
    "2030-01-01T00:00:00",  # no offset: not a position this API writes
])
@pytest.mark.parametrize("path", [JOBS, "/api/v1/executions/"])
def test_a_cursor_position_out_of_range_is_404_not_500(tenant_api, path, position):
    import base64

    create(tenant_api, delay_ms=60_000)
    cursor = base64.b64encode(f"p={position}&o=99999999999999999999".encode()).decode()
    response = tenant_api.get(path, {"cursor": cursor})
    assert response.status_code == 404
    assert response.json() == {"detail": "Invalid cursor"}


def test_an_id_that_is_not_a_uuid_is_404(tenant_api):
    for method in ("get", "delete"):
        response = getattr(tenant_api, method)(f"{JOBS}not-a-uuid/")
        assert response.status_code == 404, method
        assert response.json() == {"detail": "No job with this id."}
    response = tenant_api.post(f"{JOBS}not-a-uuid/pause/")
    assert response.status_code == 404


def test_an_unknown_field_whose_name_holds_a_nul_is_refused_not_a_server_error(tenant_api):
    body = b'[{"job_type": "tests.noop", "delay_ms": 1000, "x\\u0000y": 1}]'
    response = tenant_api.post("/api/v1/jobs/bulk/", body, content_type="application/json",
                               HTTP_IDEMPOTENCY_KEY="nul-in-a-field-name")
    assert response.status_code == 400
    assert "x\\u0000y" in response.json()["errors"][0]["field"]


@pytest.mark.parametrize("item", [
    {"job_type": "tests.noop", "run_at": "2030-01-01T00:00:00\u0000"},
    {"job_type": "tests.noop", "cron_expression": "0 0 * * \u0000"},
    {"job_type": "tests.noop", "cron_expression": "0 0 * * *", "timezone": "Europe/\u0000"},
])
def test_a_nul_quoted_back_in_an_error_is_stored_for_idempotent_replay(tenant_api, item):
    for path, body in (("/api/v1/jobs/", item), ("/api/v1/jobs/bulk/", [item])):
        first = tenant_api.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=f"nul{path}")
        again = tenant_api.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=f"nul{path}")
        assert first.status_code == again.status_code == 400, first.content
        assert again.json() == first.json() or "\\u0000" in again.content.decode()



@pytest.mark.parametrize(("expression", "message"), [
    ("² * * * *", "minute field '²' uses '²' (U+00B2 SUPERSCRIPT TWO), which is not ASCII; "
     "write numbers with the digits 0-9 and names in English letters"),
    ("٣ * * * *", "minute field '٣' uses '٣' (U+0663 ARABIC-INDIC DIGIT THREE), which is not "
     "ASCII; write numbers with the digits 0-9 and names in English letters"),
])
def test_a_cron_digit_that_is_not_ascii_is_400_and_nothing_is_stored(tenant_api, expression,
                                                                     message):
    response = create(tenant_api, cron_expression=expression)
    assert response.status_code == 400
    assert response.json() == {"cron_expression": [message]}
    assert not Job.objects.exists()


# Control characters: every text field of a job refuses them alike, in a create, a bulk item
# and a PATCH (the Python API too: test_scheduling_api).

IN_AN_HOUR = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
CONTROL_CHARACTER_CASES = [
    ({"delay_ms": 0, "name": "nightly\x00"}, "name",
     "Contains a control character (U+0000, NUL) at position 7; remove it."),
    ({"delay_ms": 0, "name": "\x1b[31mred"}, "name",
     "Contains a control character (U+001B, escape) at position 0; remove it."),
    ({"delay_ms": 0, "name": "two\nlines"}, "name",
     "Contains a control character (U+000A, line feed) at position 3; remove it."),
    ({"delay_ms": 0, "name": "c1\x85"}, "name",
     "Contains a control character (U+0085) at position 2; remove it."),
    ({"delay_ms": 0, "job_type": "tests.noop\x00"}, "job_type",
     "Contains a control character (U+0000, NUL) at position 10; remove it."),
    ({"delay_ms": 0, "queue": "reports\t"}, "queue",
     "Contains a control character (U+0009, tab) at position 7; remove it."),
    ({"run_at": IN_AN_HOUR.isoformat() + "\x00"}, "run_at",
     "Contains a control character (U+0000, NUL) at position 25; remove it."),
    ({"cron_expression": "0\t9 * * *"}, "cron_expression",
     "Contains a control character (U+0009, tab) at position 1; remove it."),
    ({"cron_expression": "0 9 * * *", "timezone": "UTC\x7f"}, "timezone",
     "Contains a control character (U+007F, delete) at position 3; remove it."),
]


@pytest.mark.parametrize(("fields", "field", "message"), CONTROL_CHARACTER_CASES)
def test_a_control_character_in_a_text_field_is_400_and_nothing_is_stored(
    tenant_api, fields, field, message
):
    response = create(tenant_api, **fields)
    assert response.status_code == 400
    assert response.json() == {field: [message]}
    assert not Job.objects.exists()


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"run_at": IN_AN_HOUR.isoformat() + "\x00"}, "run_at",
     "Contains a control character (U+0000, NUL) at position 25; remove it."),
    ({"cron_expression": "0\t9 * * *"}, "cron_expression",
     "Contains a control character (U+0009, tab) at position 1; remove it."),
    ({"timezone": "Europe/Paris\x1f"}, "timezone",
     "Contains a control character (U+001F) at position 12; remove it."),
])
def test_a_control_character_in_a_patch_is_400_and_changes_nothing(tenant_api, fields, field,
                                                                   message):
    kind = {"cron_expression": "@daily"} if "run_at" not in fields else {"delay_ms": 60_000}
    job = create(tenant_api, **kind).json()
    response = tenant_api.patch_json(f"{JOBS}{job['job_id']}/", fields)
    assert response.status_code == 400
    assert response.json() == {field: [message]}
    stored = Job.objects.get(job_id=job["job_id"])
    assert (stored.cron_expression, stored.timezone) == (job["cron_expression"], job["timezone"])
    assert stored.updated_at.isoformat().replace("+00:00", "Z") == job["updated_at"]


def test_an_unknown_field_or_choice_with_a_control_character_is_quoted_escaped(tenant_api):
    response = create(tenant_api, cron_expression="@daily", overlap_policy="skip\x1b",
                      **{"colour\x07": 1})
    assert response.status_code == 400
    assert response.json() == {
        "colour\\u0007": ["Unknown field; the fields are: job_type, name, queue, args, kwargs, "
                          "max_retries, run_at, delay_ms, cron_expression, interval_ms, "
                          "interval_anchor, timezone, retry_policy, soft_timeout_ms, "
                          "hard_timeout_ms, overlap_policy, "
                          "misfire_policy, misfire_fire_all_limit, jitter_ms, calendars."],
        "overlap_policy": ["'skip\\u001b' is not an overlap policy; use one of allow, skip, "
                           "buffer_one, cancel_previous."],
    }


# The payload limit: the UTF-8 bytes of args and of kwargs as compact JSON, added; the same
# measure for a single create, a bulk item and the Python API (test_scheduling_api).

LIMIT = 262_144  # CHRONO_MAX_PAYLOAD_BYTES' default, 256 KiB


def payload_of(size: int) -> dict:
    """kwargs that make args ([], 2 bytes) and kwargs exactly ``size`` bytes: {"k":"éé…"}, an é
    being 2 bytes in UTF-8 (and 6 as an ASCII escape, which must not be what counts)."""
    pairs, odd = divmod(size - 2 - len('{"k":""}'), 2)
    return {"k": "é" * pairs + "a" * odd}


def test_a_payload_of_exactly_the_limit_is_accepted_and_one_byte_more_is_413(tenant_api):
    assert create(tenant_api, delay_ms=0, kwargs=payload_of(LIMIT)).status_code == 201
    response = create(tenant_api, delay_ms=0, kwargs=payload_of(LIMIT + 1))
    assert response.status_code == 413
    assert response.json() == {"args": [
        f"args and kwargs are {LIMIT + 1} bytes as JSON; the limit is {LIMIT} bytes. Pass a "
        "reference (an id, a URL) instead of the data itself."]}
    assert Job.objects.count() == 1


def test_non_ascii_text_counts_its_utf8_bytes_in_a_create_and_in_bulk_alike(tenant_api):
    kwargs = {"k": "é" * 75_000}  # 150,010 bytes in UTF-8, 450,010 as ASCII escapes
    assert create(tenant_api, delay_ms=0, kwargs=kwargs).status_code == 201
    response = tenant_api.post_json("/api/v1/jobs/bulk/", [
        {"job_type": "tests.noop", "delay_ms": 0, "kwargs": kwargs}])
    assert response.status_code == 201


# Integers: kept exactly within the signed 64-bit range, refused outside it (JSON parsers read
# them as floats, silently losing digits).

INT64_RANGE = "(-9223372036854775808 to 9223372036854775807)"


@pytest.mark.parametrize(("literal", "field", "message"), [
    (b'"args": [1, 18446744073709551616]', "args",
     f"args[1] is 18446744073709551616, outside the signed 64-bit integer range {INT64_RANGE}; "
     "send it as a string."),
    (b'"args": [9223372036854775808]', "args",
     f"args[0] is 9223372036854775808, outside the signed 64-bit integer range {INT64_RANGE}; "
     "send it as a string."),
    (b'"kwargs": {"order": {"line items": [{"qty": -9223372036854775809}]}}', "kwargs",
     'kwargs.order["line items"][0].qty is -9223372036854775809, outside the signed 64-bit '
     f"integer range {INT64_RANGE}; send it as a string."),
    (b'"kwargs": {"n": 123456789012345678901234567890123456789012345678901234567890}', "kwargs",
     "kwargs.n is 123456789012345678901234567890123456789012345678901234567890, outside the "
     f"signed 64-bit integer range {INT64_RANGE}; send it as a string."),
])
def test_an_integer_outside_64_bits_is_400_naming_its_path(tenant_api, literal, field, message):
    body = b'{"job_type": "tests.noop", "delay_ms": 0, ' + literal + b"}"
    response = tenant_api.post(JOBS, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {field: [message]}
    assert not Job.objects.exists()


def test_integers_at_the_ends_of_64_bits_are_kept_exactly(tenant_api):
    body = (b'{"job_type": "tests.noop", "delay_ms": 0, "args": [9223372036854775807, '
            b'-9223372036854775808, 9007199254740993, "18446744073709551616"]}')
    response = tenant_api.post(JOBS, body, content_type="application/json")
    assert response.status_code == 201, response.json()
    expected = [2**63 - 1, -(2**63), 2**53 + 1, "18446744073709551616"]
    assert Job.objects.get().args == expected
    assert response.json()["args"] == expected


def test_a_huge_integer_in_another_field_is_refused_as_out_of_range_not_as_a_float(tenant_api):
    body = b'{"job_type": "tests.noop", "delay_ms": 100000000000000000000, "max_retries": ' \
           b'100000000000000000000}'
    response = tenant_api.post(JOBS, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {
        "delay_ms": ["Is more than 100 years (3162240000000 ms); give a smaller delay."],
        "max_retries": ["Is 100000000000000000000; use a whole number from 0 to 100."],
    }


def test_a_payload_nested_deeper_than_json_can_be_written_is_400(tenant_api):
    body = (b'{"job_type": "tests.noop", "delay_ms": 0, "args": ' + b"[" * 300 + b"]" * 300
            + b"}")
    response = tenant_api.post(JOBS, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"args": [
        "Cannot be written as JSON (Recursion limit reached); send JSON values only."]}
