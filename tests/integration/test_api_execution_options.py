"""A job's execution options over the REST API: retry policy, timeouts, overlap and misfire
policies, jitter. Each is stored on create (single and bulk), shown on retrieve and list,
changed by PATCH, refused with a message saying what to change, and carried to the worker."""

from __future__ import annotations

import json

import amqp
import pytest

from chronocore.config import get_config
from scheduler import occurrences
from scheduler.beat import _task_message
from scheduler.clock import datetime_to_ms
from scheduler.dispatch import Publisher, amqp_connection_params
from scheduler.misfire import MisfirePolicy, MisfireRule, jittered_ms
from scheduler.models import Job
from scheduler.retry import RetryPolicy
from scheduler.timers import timer_store

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
BULK = "/api/v1/jobs/bulk/"
ONE_TIME = {"job_type": "tests.noop", "delay_ms": 60_000}
CRON = {"job_type": "tests.noop", "cron_expression": "*/5 * * * *"}
DEFAULT_POLICY = {"max_attempts": 1, "initial_delay_ms": 1000, "multiplier": 2.0,
                  "max_delay_ms": 300_000, "non_retryable": []}
POLICY = {"max_attempts": 4, "initial_delay_ms": 500, "multiplier": 3.0, "max_delay_ms": 20_000,
          "non_retryable": ["ValueError", "billing.errors.CardDeclined"]}

# field -> (the job it goes on, what is sent, what the API answers and the row holds)
OPTIONS = {
    "max_retries": (ONE_TIME, {"max_retries": 3}, {"max_retries": 3}),
    "retry_policy": (ONE_TIME, {"retry_policy": POLICY}, {"retry_policy": POLICY}),
    "soft_timeout_ms": (ONE_TIME, {"soft_timeout_ms": 5_000}, {"soft_timeout_ms": 5_000}),
    "hard_timeout_ms": (ONE_TIME, {"hard_timeout_ms": 9_000}, {"hard_timeout_ms": 9_000}),
    "overlap_policy": (CRON, {"overlap_policy": "buffer_one"}, {"overlap_policy": "buffer_one"}),
    "misfire_policy": (ONE_TIME, {"misfire_policy": "skip"}, {"misfire_policy": "skip"}),
    "misfire_fire_all_limit": (
        CRON, {"misfire_policy": "fire_all", "misfire_fire_all_limit": 3},
        {"misfire_policy": "fire_all", "misfire_fire_all_limit": 3}),
    "jitter_ms": (CRON, {"jitter_ms": 45_000}, {"jitter_ms": 45_000}),
}


def create(api, job: dict, **options) -> dict:
    response = api.post_json(JOBS, job | options)
    assert response.status_code == 201, response.json()
    return response.json()


def stored(job_id: str, fields: dict) -> dict:
    """The row's values of ``fields`` (retry_policy as the effective policy)."""
    job = Job.objects.get(job_id=job_id)
    values = {name: getattr(job, name) for name in fields}
    if "retry_policy" in fields:
        values["retry_policy"] = RetryPolicy.from_json(job.retry_policy).to_json()
    return values


def shown(body: dict, fields: dict) -> dict:
    return {name: body[name] for name in fields}


# Create, retrieve, list, bulk, PATCH: one case per option.


@pytest.mark.parametrize("option", OPTIONS)
def test_an_option_given_on_create_is_stored_and_answered(tenant_api, option):
    job, sent, expected = OPTIONS[option]
    body = create(tenant_api, job, **sent)
    assert shown(body, expected) == expected
    assert stored(body["job_id"], expected) == expected


@pytest.mark.parametrize("option", OPTIONS)
def test_an_option_is_shown_by_retrieve_and_list(tenant_api, option):
    job, sent, expected = OPTIONS[option]
    job_id = create(tenant_api, job, **sent)["job_id"]
    assert shown(tenant_api.get(f"{JOBS}{job_id}/").json(), expected) == expected
    (listed,) = tenant_api.get(JOBS).json()["results"]
    assert shown(listed, expected) == expected


@pytest.mark.parametrize("option", OPTIONS)
def test_an_option_given_in_bulk_is_written_by_the_copy(
    tenant_api, option, django_capture_on_commit_callbacks
):
    job, sent, expected = OPTIONS[option]
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.post_json(BULK, [job | sent, job])
    assert response.status_code == 201, response.json()
    with_option, without = response.json()["ids"]
    assert stored(with_option, expected) == expected
    assert shown(tenant_api.get(f"{JOBS}{with_option}/").json(), expected) == expected
    # The item without it gets the model's default, as a single create would.
    plain = create(tenant_api, job)
    assert shown(tenant_api.get(f"{JOBS}{without}/").json(), expected) == shown(plain, expected)
    for job_id in (with_option, without):
        row = Job.objects.get(job_id=job_id)
        assert timer_store().fire_time_of(job_id) == datetime_to_ms(row.next_run_at)


@pytest.mark.parametrize("option", OPTIONS)
def test_patch_changes_an_option(tenant_api, option):
    job, sent, expected = OPTIONS[option]
    job_id = create(tenant_api, job)["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", sent)
    assert response.status_code == 200, response.json()
    assert shown(response.json(), expected) == expected
    assert stored(job_id, expected) == expected


def test_a_job_without_options_shows_the_defaults(tenant_api):
    body = create(tenant_api, ONE_TIME)
    defaults = {
        "max_retries": 0, "retry_policy": DEFAULT_POLICY, "soft_timeout_ms": None,
        "hard_timeout_ms": None, "overlap_policy": "skip", "misfire_policy": "fire_once",
        "misfire_fire_all_limit": 10, "jitter_ms": 0,
    }
    assert shown(body, defaults) == defaults
    assert Job.objects.get(job_id=body["job_id"]).retry_policy == {}


# max_retries and retry_policy.max_attempts: one setting, two spellings.


def test_max_retries_alone_keeps_the_default_backoff_and_is_shown_as_max_attempts(tenant_api):
    body = create(tenant_api, ONE_TIME, max_retries=2)
    assert body["retry_policy"] == DEFAULT_POLICY | {"max_attempts": 3}
    job = Job.objects.get(job_id=body["job_id"])
    assert (job.max_retries, job.retry_policy) == (2, {})  # as before retry_policy existed


def test_a_retry_policy_without_max_attempts_takes_it_from_max_retries(tenant_api):
    body = create(tenant_api, ONE_TIME, max_retries=5, retry_policy={"multiplier": 1.5})
    assert body["retry_policy"] == DEFAULT_POLICY | {"max_attempts": 6, "multiplier": 1.5}
    assert body["max_retries"] == 5


def test_max_attempts_alone_sets_max_retries(tenant_api):
    body = create(tenant_api, ONE_TIME, retry_policy={"max_attempts": 7})
    assert (body["max_retries"], body["retry_policy"]["max_attempts"]) == (6, 7)
    assert Job.objects.get(job_id=body["job_id"]).max_retries == 6


def test_max_retries_and_max_attempts_that_agree_are_accepted(tenant_api):
    body = create(tenant_api, ONE_TIME, max_retries=2, retry_policy={"max_attempts": 3})
    assert (body["max_retries"], body["retry_policy"]["max_attempts"]) == (2, 3)


def test_patch_merges_retry_policy_keys_into_the_jobs_policy(tenant_api):
    job_id = create(tenant_api, ONE_TIME, retry_policy=POLICY)["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"retry_policy": {"multiplier": 1.0}})
    assert response.status_code == 200, response.json()
    assert response.json()["retry_policy"] == POLICY | {"multiplier": 1.0}
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"max_retries": 0})
    assert response.json()["retry_policy"] == POLICY | {"multiplier": 1.0, "max_attempts": 1}
    assert stored(job_id, {"max_retries": 0}) == {"max_retries": 0}


def test_patch_can_remove_a_timeout_with_null(tenant_api):
    job_id = create(tenant_api, ONE_TIME, soft_timeout_ms=1_000,
                                   hard_timeout_ms=2_000)["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"hard_timeout_ms": None})
    assert response.status_code == 200, response.json()
    assert stored(job_id, {"soft_timeout_ms": 0, "hard_timeout_ms": 0}) == {
        "soft_timeout_ms": 1_000, "hard_timeout_ms": None}


def test_patch_of_the_jitter_moves_the_pending_occurrence_and_its_timer(
    tenant_api, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        job_id = create(tenant_api, CRON)["job_id"]
    occurrence_ms = datetime_to_ms(Job.objects.get(job_id=job_id).next_run_at)
    with django_capture_on_commit_callbacks(execute=True):
        response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"jitter_ms": 200_000})
    assert response.status_code == 200, response.json()
    moved_ms = jittered_ms(job_id, occurrence_ms, 200_000)
    assert datetime_to_ms(Job.objects.get(job_id=job_id).next_run_at) == moved_ms
    assert timer_store().fire_time_of(job_id) == moved_ms


def test_a_jittered_cron_job_shows_the_fire_times_the_beat_will_use(
    tenant_api, django_capture_on_commit_callbacks
):
    """Each shown time is its occurrence moved by the job's jitter, the first one the pending
    occurrence the timer holds: not the bare cron times, up to the jitter early, and not an
    occurrence from before the job was created that the jitter would put after now."""
    from datetime import datetime

    from scheduler.cron import parse_cron

    with django_capture_on_commit_callbacks(execute=True):
        job_id = create(tenant_api, CRON | {"jitter_ms": 250_000})["job_id"]
    shown = [datetime_to_ms(datetime.fromisoformat(t["utc"].replace("Z", "+00:00")))
             for t in tenant_api.get(f"{JOBS}{job_id}/").json()["next_fire_times"]]
    occurrences = parse_cron("*/5 * * * *", "UTC").fire_times_ms(shown[0] - 250_000, 5)
    assert shown == [jittered_ms(job_id, ms, 250_000) for ms in occurrences]
    assert shown != occurrences
    assert shown[0] == timer_store().fire_time_of(job_id)


def test_a_triggered_cron_job_shows_the_trigger_first_then_its_schedule(
    tenant_api, django_capture_on_commit_callbacks
):
    from datetime import datetime

    from scheduler import api
    from scheduler.cron import parse_cron

    with django_capture_on_commit_callbacks(execute=True):
        job_id = create(tenant_api, CRON | {"jitter_ms": 250_000})["job_id"]
    with django_capture_on_commit_callbacks(execute=True):
        assert api.trigger(job_id, tenant=tenant_api.tenant)
    shown = [datetime_to_ms(datetime.fromisoformat(t["utc"].replace("Z", "+00:00")))
             for t in tenant_api.get(f"{JOBS}{job_id}/").json()["next_fire_times"]]
    assert shown[0] == timer_store().fire_time_of(job_id)
    after = parse_cron("*/5 * * * *", "UTC").fire_times_ms(shown[0], 4)
    assert shown[1:] == [jittered_ms(job_id, ms, 250_000) for ms in after]


def test_a_jittered_cron_job_from_bulk_fires_within_its_spread(tenant_api):
    single = create(tenant_api, CRON)
    response = tenant_api.post_json(BULK, [CRON | {"jitter_ms": 250_000}])
    job_id = response.json()["ids"][0]
    occurrence_ms = datetime_to_ms(Job.objects.get(job_id=single["job_id"]).next_run_at)
    fire_ms = datetime_to_ms(Job.objects.get(job_id=job_id).next_run_at)
    assert fire_ms == jittered_ms(job_id, occurrence_ms, 250_000)


# Bad input: 400 with the field and what to change.

BAD = {
    "multiplier_below_one": (
        ONE_TIME, {"retry_policy": {"multiplier": 0.5}}, "retry_policy.multiplier",
        "Is 0.5; use a number from 1 (the same delay every time) to 100, by which each delay "
        "grows."),
    "multiplier_not_a_number": (
        ONE_TIME, {"retry_policy": {"multiplier": "2"}}, "retry_policy.multiplier",
        "Must be a number from 1 (the same delay every time) to 100, by which each delay "
        "grows, got a string."),
    "negative_initial_delay": (
        ONE_TIME, {"retry_policy": {"initial_delay_ms": -100}}, "retry_policy.initial_delay_ms",
        "Is negative (-100); use a whole number of milliseconds from 0 to 86400000."),
    "negative_max_delay": (
        ONE_TIME, {"retry_policy": {"max_delay_ms": -1}}, "retry_policy.max_delay_ms",
        "Is negative (-1); use a whole number of milliseconds from 0 to 86400000."),
    "initial_delay_above_max_delay": (
        ONE_TIME, {"retry_policy": {"initial_delay_ms": 600_000}},
        "retry_policy.initial_delay_ms",
        "Is 600000, above max_delay_ms (300000), so every delay would be max_delay_ms; lower "
        "initial_delay_ms or raise max_delay_ms."),
    "unknown_key_in_retry_policy": (
        ONE_TIME, {"retry_policy": {"max_attemps": 3}}, "retry_policy.max_attemps",
        "Unknown field; did you mean 'max_attempts'? the fields are: max_attempts, "
        "initial_delay_ms, multiplier, max_delay_ms, non_retryable."),
    "retry_policy_not_an_object": (
        ONE_TIME, {"retry_policy": [3]}, "retry_policy",
        "Must be a JSON object with any of max_attempts, initial_delay_ms, multiplier, "
        "max_delay_ms, non_retryable, got an array; leave it out for the default policy."),
    "zero_attempts": (
        ONE_TIME, {"retry_policy": {"max_attempts": 0}}, "retry_policy.max_attempts",
        "Is 0; use a whole number from 1 to 101."),
    "non_retryable_not_a_class_name": (
        ONE_TIME, {"retry_policy": {"non_retryable": ["ValueError", "not a class"]}},
        "retry_policy.non_retryable",
        "Item 1 ('not a class') is not an exception name; use exception class names such as "
        "'ValueError' or 'billing.errors.CardDeclined'."),
    "max_retries_contradicts_max_attempts": (
        ONE_TIME, {"max_retries": 3, "retry_policy": {"max_attempts": 2}},
        "retry_policy.max_attempts",
        "Is 2, which contradicts max_retries 3: max_attempts counts the first run, so it must "
        "be max_retries + 1 = 4. Give one of the two, or make them agree."),
    "soft_timeout_not_below_hard": (
        ONE_TIME, {"soft_timeout_ms": 5_000, "hard_timeout_ms": 5_000}, "soft_timeout_ms",
        "soft_timeout_ms (5000) must be below hard_timeout_ms (5000), so the task is warned "
        "(SoftTimeLimitExceeded) before it is killed; lower soft_timeout_ms or raise "
        "hard_timeout_ms."),
    "zero_timeout": (
        ONE_TIME, {"hard_timeout_ms": 0}, "hard_timeout_ms",
        "Is 0; use a whole number of milliseconds from 1 to 86400000 (a day), or null for no "
        "limit."),
    "timeout_as_text": (
        ONE_TIME, {"soft_timeout_ms": "5s"}, "soft_timeout_ms",
        "Must be a whole number of milliseconds from 1 to 86400000 (a day), or null for no "
        "limit, got a string."),
    "unknown_overlap_policy": (
        CRON, {"overlap_policy": "queue"}, "overlap_policy",
        "'queue' is not an overlap policy; use one of allow, skip, buffer_one, "
        "cancel_previous."),
    "unknown_misfire_policy": (
        ONE_TIME, {"misfire_policy": "later"}, "misfire_policy",
        "'later' is not a misfire policy; use one of fire_once, fire_all, skip."),
    "misfire_policy_not_a_string": (
        ONE_TIME, {"misfire_policy": 1}, "misfire_policy",
        "a number is not a misfire policy; use one of fire_once, fire_all, skip."),
    "fire_all_limit_without_fire_all": (
        CRON, {"misfire_fire_all_limit": 5}, "misfire_fire_all_limit",
        "Applies to misfire_policy 'fire_all' only (this job's is 'fire_once'); add "
        "\"misfire_policy\": \"fire_all\" or leave misfire_fire_all_limit out."),
    "fire_all_limit_zero": (
        CRON, {"misfire_policy": "fire_all", "misfire_fire_all_limit": 0},
        "misfire_fire_all_limit", "Is 0; use a whole number from 1 to 1000."),
    "jitter_not_below_the_period": (
        CRON, {"jitter_ms": 300_000}, "jitter_ms",
        "Is 300000, not below the 300000 ms between occurrences of this schedule; use less "
        "than 300000 so each occurrence fires before the next one."),
    "jitter_above_the_shortest_gap": (
        CRON | {"cron_expression": "0 9,10 * * *"}, {"jitter_ms": 7_200_000}, "jitter_ms",
        "Is 7200000, not below the 3600000 ms between occurrences of this schedule; use less "
        "than 3600000 so each occurrence fires before the next one."),
    "negative_jitter": (
        CRON, {"jitter_ms": -1}, "jitter_ms",
        "Is negative (-1); use a whole number of milliseconds from 0 to 604800000."),
    "jitter_on_a_one_time_job": (
        ONE_TIME, {"jitter_ms": 1_000}, "jitter_ms",
        "jitter_ms applies to cron and interval jobs only (a one-time job has one "
        "occurrence); leave it out."),
    "overlap_on_a_one_time_job": (
        ONE_TIME, {"overlap_policy": "allow"}, "overlap_policy",
        "overlap_policy applies to cron and interval jobs only (a one-time job has one "
        "occurrence); leave it out."),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_options_are_refused_on_create_with_what_to_change(tenant_api, case):
    job, sent, field, message = BAD[case]
    response = tenant_api.post_json(JOBS, job | sent)
    assert response.status_code == 400, response.json()
    assert response.json() == {field: [message]}
    assert not Job.objects.exists()


@pytest.mark.parametrize("case", BAD)
def test_bad_options_are_an_items_error_in_bulk(tenant_api, case):
    job, sent, field, message = BAD[case]
    response = tenant_api.post_json(BULK, [job | sent, job])
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["errors"] == [{"index": 0, "field": field, "message": message}]
    assert body["ids"][0] is None and body["created"] == 1


@pytest.mark.parametrize("case", BAD)
def test_bad_options_are_refused_by_patch_and_change_nothing(tenant_api, case):
    job, sent, field, message = BAD[case]
    job_id = create(tenant_api, job)["job_id"]
    before = tenant_api.get(f"{JOBS}{job_id}/").json()
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", sent)
    assert response.status_code == 400, response.json()
    assert response.json() == {field: [message]}
    after = tenant_api.get(f"{JOBS}{job_id}/").json()
    assert after | {"next_fire_times": None} == before | {"next_fire_times": None}


def test_patch_checks_a_timeout_against_the_one_the_job_has(tenant_api):
    job_id = create(tenant_api, ONE_TIME, hard_timeout_ms=3_000)["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"soft_timeout_ms": 4_000})
    assert response.status_code == 400
    assert response.json() == {"soft_timeout_ms": [
        "soft_timeout_ms (4000) must be below hard_timeout_ms (3000), so the task is warned "
        "(SoftTimeLimitExceeded) before it is killed; lower soft_timeout_ms or raise "
        "hard_timeout_ms."]}


def test_patch_checks_max_retries_against_the_policy_it_sends(tenant_api):
    job_id = create(tenant_api, ONE_TIME, retry_policy=POLICY)["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {
        "max_retries": 1, "retry_policy": {"max_attempts": 5}})
    assert response.status_code == 400
    assert list(response.json()) == ["retry_policy.max_attempts"]
    # max_retries alone re-counts the job's policy: no contradiction with what is stored.
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"max_retries": 1})
    assert response.json()["retry_policy"]["max_attempts"] == 2


def test_a_new_schedule_must_leave_room_for_the_jitter_the_job_keeps(tenant_api):
    job_id = create(tenant_api, CRON, jitter_ms=120_000)["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"cron_expression": "* * * * *"})
    assert response.status_code == 400
    assert response.json() == {"jitter_ms": [
        "Is 120000, not below the 60000 ms between occurrences of this schedule; use less "
        "than 60000 so each occurrence fires before the next one."]}
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {"cron_expression": "* * * * *",
                                                          "jitter_ms": 30_000})
    assert response.status_code == 200, response.json()
    assert (response.json()["cron_expression"], response.json()["jitter_ms"]) == (
        "* * * * *", 30_000)


@pytest.mark.parametrize("value", [10**30, -(10**30), 1e300, True, None, {"a": 1}, "NaN"])
def test_odd_values_in_every_option_are_a_400_never_a_500(tenant_api, value):
    for field in ("max_retries", "soft_timeout_ms", "overlap_policy", "misfire_policy",
                  "misfire_fire_all_limit", "jitter_ms", "retry_policy"):
        response = tenant_api.post_json(JOBS, CRON | {field: value})
        if value is None and field == "soft_timeout_ms":
            assert response.status_code == 201
            continue
        assert response.status_code == 400, (field, response.content)
        assert all(key.startswith(field) for key in response.json()), response.json()
    for key in ("max_attempts", "initial_delay_ms", "multiplier", "max_delay_ms",
                "non_retryable"):
        response = tenant_api.post_json(JOBS, CRON | {"retry_policy": {key: value}})
        assert response.status_code == 400, (key, response.content)
        assert list(response.json()) == [f"retry_policy.{key}"]


# The options reach the worker: the message the beat publishes for an occurrence.


def published(job_ids: list[str], queue: str) -> dict[str, amqp.Message]:
    """What the beat publishes for the pending occurrence of each job (as it loads the rows
    with load_and_insert and builds the messages), read back from RabbitMQ by job id."""
    rows = Job.objects.filter(job_id__in=job_ids)
    due = occurrences.load_and_insert([(str(j.job_id), datetime_to_ms(j.next_run_at))
                                       for j in rows])
    publisher = Publisher(get_config().broker_url, origin="test")
    publisher.publish_batch([_task_message(due[str(j.job_id)], datetime_to_ms(j.next_run_at),
                                           "test|1") for j in rows])
    publisher.close()
    messages = {}
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        channel = conn.channel()
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            messages[message.headers["chrono_job_id"]] = message
    return messages


def worker_policy(message: amqp.Message) -> dict:
    """The policy as the worker reads it (scheduler.worker.ChronoTask._retry_policy)."""
    return RetryPolicy.from_json(json.loads(message.headers["chrono_retry_policy"])).to_json()


def test_a_retry_policy_and_timeouts_given_over_rest_reach_the_published_message(
    tenant_api, queue
):
    options = {"queue": queue, "retry_policy": POLICY, "soft_timeout_ms": 1_500,
               "hard_timeout_ms": 4_000}
    single = create(tenant_api, ONE_TIME, **options)["job_id"]
    bulk, legacy = tenant_api.post_json(BULK, [
        ONE_TIME | options, ONE_TIME | {"queue": queue, "max_retries": 2}]).json()["ids"]
    messages = published([single, bulk, legacy], queue)
    for job_id in (single, bulk):
        assert worker_policy(messages[job_id]) == POLICY
        assert messages[job_id].headers["timelimit"] == [4.0, 1.5]  # [hard, soft] seconds
    assert worker_policy(messages[legacy]) == DEFAULT_POLICY | {"max_attempts": 3}
    assert messages[legacy].headers["timelimit"] == [None, None]


def test_a_retry_policy_changed_by_patch_is_what_the_next_occurrence_carries(
    tenant_api, queue
):
    job_id = create(tenant_api, CRON, queue=queue, max_retries=1)["job_id"]
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", {
        "retry_policy": {"initial_delay_ms": 50, "non_retryable": ["KeyError"]},
        "hard_timeout_ms": 10_000})
    assert response.status_code == 200, response.json()
    message = published([job_id], queue)[job_id]
    assert worker_policy(message) == DEFAULT_POLICY | {
        "max_attempts": 2, "initial_delay_ms": 50, "non_retryable": ["KeyError"]}
    assert message.headers["timelimit"] == [10.0, None]


def test_the_policies_and_jitter_reach_the_row_the_beat_reads(tenant_api):
    job_id = create(tenant_api, CRON, overlap_policy="cancel_previous",
                                   misfire_policy="fire_all", misfire_fire_all_limit=4,
                                   jitter_ms=10_000)["job_id"]
    bulk_id = tenant_api.post_json(BULK, [CRON | {"overlap_policy": "allow",
                                                  "misfire_policy": "skip"}]).json()["ids"][0]
    rows = {str(j.job_id): j for j in Job.objects.all()}
    due = occurrences.load_and_insert([(i, datetime_to_ms(j.next_run_at))
                                       for i, j in rows.items()])
    assert (due[job_id].overlap_policy, due[job_id].misfire, due[job_id].jitter_ms) == (
        "cancel_previous", MisfireRule(MisfirePolicy.FIRE_ALL, 4), 10_000)
    assert (due[bulk_id].overlap_policy, due[bulk_id].misfire, due[bulk_id].jitter_ms) == (
        "allow", MisfireRule(MisfirePolicy.SKIP, 10), 0)
