"""The Python API and REST accept and refuse exactly the same job specs, naming the same field.

One table of cases (``CREATES``), each a job spec in the REST API's words (the body of ``POST
/api/v1/jobs/``) and the field a refusal must name (None: accepted), covering every rule of
:mod:`scheduler.specs` with a valid and an invalid value. Each case runs three ways against the
real PostgreSQL and Redis: a REST single create, a REST bulk item, and the Python API
(``schedule_once`` or ``schedule_cron``), the spec turned into its arguments by this test
(:func:`python_arguments`), not by the code under test. A Python argument names one or more REST
fields (``retry`` is ``retry_policy`` and its keys, ``misfire`` the misfire policy and its limit,
a cron part such as ``minute`` the cron expression): :data:`ARGUMENT_FIELDS` says which.

A policy value the Python API cannot even build (``RetryPolicy(multiplier=0.5)`` raises) counts
as the Python API refusing its argument. A few specs have no Python form (a fraction of a
millisecond of delay: ``delay=`` is seconds; a cron-only option on a one-time job:
``schedule_once`` has no such argument; a fire_all limit with another policy: a ``MisfireRule``
always has a limit); they run through REST only, and say why (``REST_ONLY``).

``CHANGES`` does the same for changes of a job (``PATCH`` against ``reschedule``/``configure``),
and the idempotency tests for the key (a job's ``idempotency_key=`` in Python, the request's
``Idempotency-Key`` header in REST, which as an HTTP header also refuses spaces and non-ASCII).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from chronocore import grants
from chronocore.models import TaskGrant
from scheduler import api
from scheduler.errors import InvalidJob, InvalidSchedule, TaskNotGranted
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.models import Job, JobStatus
from scheduler.retry import RetryPolicy
from tests.integration.test_api_validation import LIMIT, payload_of

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
BULK = "/api/v1/jobs/bulk/"
ONCE = {"job_type": "tests.noop", "delay_ms": 60_000}
CRON = {"job_type": "tests.noop", "cron_expression": "*/5 * * * *"}
EVERYTHING = (("*", "*"),)
BILLING = (("billing.*", "billing"),)
POLICY = {"max_attempts": 4, "initial_delay_ms": 500, "multiplier": 3.0, "max_delay_ms": 20_000,
          "non_retryable": ["ValueError", "billing.errors.CardDeclined"]}

# A Python argument -> the REST fields it stands for (the same name when absent).
ARGUMENT_FIELDS = {
    "task_name": {"job_type"}, "at": {"run_at"}, "delay": {"delay_ms"},
    "cron": {"cron_expression"}, "expression": {"cron_expression"},
    "minute": {"cron_expression"}, "hour": {"cron_expression"},
    "day_of_month": {"cron_expression"}, "retry": {"retry_policy"},
    "overlap": {"overlap_policy"}, "misfire": {"misfire_policy", "misfire_fire_all_limit"},
}


def iso_in(seconds: float) -> Callable[[], str]:
    """A run_at ``seconds`` from when the case runs (negative: in the past)."""
    return lambda: (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


@dataclasses.dataclass(frozen=True)
class Case:
    rule: str
    what: str
    spec: dict  # a value may be a callable, called when the case runs (times relative to now)
    field: str | None  # the REST field a refusal names; None: accepted
    grants: tuple[tuple[str, str], ...] = EVERYTHING

    @property
    def id(self) -> str:
        return f"{self.rule}: {self.what}"

    def resolved(self) -> dict:
        return {key: value() if callable(value) else value for key, value in self.spec.items()}


def once(rule: str, what: str, field: str | None, **fields) -> Case:
    return Case(rule, what, ONCE | fields, field)


def cron(rule: str, what: str, field: str | None, **fields) -> Case:
    return Case(rule, what, CRON | fields, field)


def at(rule: str, what: str, field: str | None, run_at) -> Case:
    return Case(rule, what, {"job_type": "tests.noop", "run_at": run_at}, field)


def nested(depth: int) -> list:
    """A list ``depth`` lists deep: deeper than JSON writers go (orjson stops at 255)."""
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


CREATES = [
    once("task name", "a Celery task name", None, job_type="billing.tasks.send_invoice"),
    once("task name", "with a space", "job_type", job_type="billing tasks"),
    once("task name", "201 characters", "job_type", job_type="t" * 201),
    once("task name", "with a NUL", "job_type", job_type="tests.noop\x00"),
    once("name", "free text", None, name="nightly ☾ report"),
    once("name", "201 characters", "name", name="n" * 201),
    once("name", "with an escape", "name", name="\x1b[31mred"),
    once("name", "with a line feed", "name", name="two\nlines"),
    once("queue", "letters, digits and . _ : -", None, queue="reports:eu-1"),
    once("queue", "with a space", "queue", queue="a b"),
    once("queue", "empty", "queue", queue=""),
    once("queue", "201 characters", "queue", queue="q" * 201),
    once("queue", "with a tab", "queue", queue="reports\t"),
    once("delay", "zero", None, delay_ms=0),
    once("delay", "negative", "delay_ms", delay_ms=-5),
    once("delay", "beyond 100 years", "delay_ms", delay_ms=100 * 366 * 86_400_000 + 1),
    at("run_at", "in an hour", None, iso_in(3_600)),
    at("run_at", "a second ago, within the grace", None, iso_in(-1)),
    at("run_at", "ten minutes ago", "run_at", iso_in(-600)),
    at("run_at", "in 200 years", "run_at", "2226-01-01T00:00:00+00:00"),
    at("run_at", "without an offset", "run_at", "2099-01-01T09:00:00"),
    at("run_at", "not a time", "run_at", "next tuesday"),
    at("run_at", "with a NUL", "run_at", "2099-01-01T09:00:00+00:00\x00"),
    cron("cron", "five fields", None),
    cron("cron", "six fields, seconds first", None, cron_expression="*/10 * * * * *"),
    cron("cron", "a macro", None, cron_expression="@daily"),
    cron("cron", "a field out of range", "cron_expression", cron_expression="61 * * * *"),
    cron("cron", "three fields", "cron_expression", cron_expression="* * *"),
    cron("cron", "never fires", "cron_expression", cron_expression="0 0 30 2 *"),
    cron("cron", "a superscript digit", "cron_expression", cron_expression="² * * * *"),
    cron("cron", "an Arabic-Indic digit", "cron_expression", cron_expression="٣ * * * *"),
    cron("cron", "with a tab", "cron_expression", cron_expression="0\t9 * * *"),
    cron("timezone", "an IANA zone", None, timezone="Europe/Paris"),
    cron("timezone", "unknown", "timezone", timezone="Europe/Pari"),
    cron("timezone", "with a NUL", "timezone", timezone="UTC\x00"),
    once("payload", "exactly the limit", None, kwargs=payload_of(LIMIT)),
    once("payload", "a byte over the limit", "args", kwargs=payload_of(LIMIT + 1)),
    once("payload", "ints at the ends of 64 bits", None, args=[2**63 - 1, -(2**63)]),
    once("payload", "an int beyond 64 bits in args", "args", args=[1, 2**64]),
    once("payload", "an int beyond 64 bits in kwargs", "kwargs", kwargs={"n": -(2**63) - 1}),
    once("payload", "a NUL in kwargs", "kwargs", kwargs={"text": "a\x00b"}),
    once("payload", "nested too deep for JSON", "args", args=nested(300)),
    once("payload", "args an object", "args", args={"a": 1}),
    once("payload", "kwargs an array", "kwargs", kwargs=[1]),
    once("max_retries", "3", None, max_retries=3),
    once("max_retries", "101", "max_retries", max_retries=101),
    once("max_retries", "negative", "max_retries", max_retries=-1),
    once("max_retries", "contradicting max_attempts", "retry_policy.max_attempts",
         max_retries=3, retry_policy={"max_attempts": 2}),
    once("retry policy", "every key", None, retry_policy=POLICY),
    once("retry policy", "one key", None, retry_policy={"multiplier": 1.5}),
    once("retry policy", "101 attempts", None, retry_policy={"max_attempts": 101}),
    once("retry policy", "102 attempts", "retry_policy.max_attempts",
         retry_policy={"max_attempts": 102}),
    once("retry policy", "no attempt", "retry_policy.max_attempts",
         retry_policy={"max_attempts": 0}),
    once("retry policy", "a multiplier below 1", "retry_policy.multiplier",
         retry_policy={"multiplier": 0.5}),
    once("retry policy", "a multiplier over 100", "retry_policy.multiplier",
         retry_policy={"multiplier": 101}),
    once("retry policy", "a multiplier as text", "retry_policy.multiplier",
         retry_policy={"multiplier": "2"}),
    once("retry policy", "a negative delay", "retry_policy.initial_delay_ms",
         retry_policy={"initial_delay_ms": -100}),
    once("retry policy", "initial delay above the cap", "retry_policy.initial_delay_ms",
         retry_policy={"initial_delay_ms": 600_000}),
    once("retry policy", "a cap of a day", None, retry_policy={"max_delay_ms": 86_400_000}),
    once("retry policy", "a cap over a day", "retry_policy.max_delay_ms",
         retry_policy={"max_delay_ms": 86_400_001}),
    once("retry policy", "50 exception names", None,
         retry_policy={"non_retryable": [f"E{i}" for i in range(50)]}),
    once("retry policy", "51 exception names", "retry_policy.non_retryable",
         retry_policy={"non_retryable": [f"E{i}" for i in range(51)]}),
    once("retry policy", "not an exception name", "retry_policy.non_retryable",
         retry_policy={"non_retryable": ["ValueError", "not a class"]}),
    once("retry policy", "an exception name with a NUL", "retry_policy.non_retryable",
         retry_policy={"non_retryable": ["Value\x00Error"]}),
    once("retry policy", "an unknown key", "retry_policy.max_attemps",
         retry_policy={"max_attemps": 3}),
    once("retry policy", "not an object", "retry_policy", retry_policy=[3]),
    once("timeouts", "soft below hard", None, soft_timeout_ms=5_000, hard_timeout_ms=9_000),
    once("timeouts", "a day", None, hard_timeout_ms=86_400_000),
    once("timeouts", "over a day", "hard_timeout_ms", hard_timeout_ms=86_400_001),
    once("timeouts", "zero", "hard_timeout_ms", hard_timeout_ms=0),
    once("timeouts", "as text", "soft_timeout_ms", soft_timeout_ms="5s"),
    once("timeouts", "soft not below hard", "soft_timeout_ms", soft_timeout_ms=5_000,
         hard_timeout_ms=5_000),
    cron("overlap", "buffer_one", None, overlap_policy="buffer_one"),
    cron("overlap", "unknown", "overlap_policy", overlap_policy="queue"),
    once("misfire", "skip", None, misfire_policy="skip"),
    once("misfire", "unknown", "misfire_policy", misfire_policy="later"),
    once("misfire", "a number", "misfire_policy", misfire_policy=1),
    cron("misfire", "fire_all up to 1000", None, misfire_policy="fire_all",
         misfire_fire_all_limit=1_000),
    cron("misfire", "fire_all up to 0", "misfire_fire_all_limit", misfire_policy="fire_all",
         misfire_fire_all_limit=0),
    cron("misfire", "fire_all up to 1001", "misfire_fire_all_limit", misfire_policy="fire_all",
         misfire_fire_all_limit=1_001),
    cron("jitter", "below the period", None, jitter_ms=45_000),
    cron("jitter", "the period", "jitter_ms", jitter_ms=300_000),
    cron("jitter", "above the shortest gap", "jitter_ms", cron_expression="0 9,10 * * *",
         jitter_ms=7_200_000),
    cron("jitter", "negative", "jitter_ms", jitter_ms=-1),
    cron("jitter", "over a week", "jitter_ms", cron_expression="0 0 1 1 *",
         jitter_ms=7 * 86_400_000 + 1),
    Case("grants", "the task on its queue", {"job_type": "billing.charge", "queue": "billing",
                                             "delay_ms": 60_000}, None, BILLING),
    Case("grants", "another task", {"job_type": "reports.daily", "queue": "billing",
                                    "delay_ms": 60_000}, "job_type", BILLING),
    Case("grants", "another queue", {"job_type": "billing.charge", "delay_ms": 60_000},
         "job_type", BILLING),
]

# Specs the Python API cannot state, and why; REST single and bulk still agree on them.
REST_ONLY = [
    (once("delay", "1.5 ms", "delay_ms", delay_ms=1.5), "delay= is seconds, any fraction"),
    (once("overlap", "on a one-time job", "overlap_policy", overlap_policy="allow"),
     "schedule_once takes no overlap="),
    (once("jitter", "on a one-time job", "jitter_ms", jitter_ms=1_000),
     "schedule_once takes no jitter_ms="),
    (cron("misfire", "a limit without fire_all", "misfire_fire_all_limit",
          misfire_fire_all_limit=5),
     "a MisfireRule always has a limit, which counts for fire_all only"),
    (once("fields", "an unknown one", "priority", priority=3),
     "an argument the API does not take is Python's own TypeError"),
]


@pytest.fixture
def granted(tenant):
    """``granted(pairs)``: the tenant granted exactly those (task, queue) patterns."""

    def grant(pairs: tuple[tuple[str, str], ...]) -> None:
        TaskGrant.objects.filter(tenant=tenant).delete()
        for task_pattern, queue_pattern in pairs:
            grants.grant(tenant, task_pattern, queue_pattern, by="tests")
        grants.forget()

    return grant


# ------------------------------------------------------------------------------- the three ways


def rest_single(tenant_api, spec: dict) -> str | None:
    """The field the REST single create refuses ``spec`` on; None when it creates it."""
    response = tenant_api.post_json(JOBS, spec)
    if response.status_code == 201:
        return None
    if response.status_code == 403:  # not granted: {"detail": ...}, the task's field in bulk
        return "job_type"
    assert response.status_code in (400, 413), response.content
    (field,) = response.json()  # one rule broken, one field named
    return field


def rest_bulk(tenant_api, spec: dict) -> str | None:
    """The field the bulk path refuses ``spec`` (one item) on; None when it creates it."""
    response = tenant_api.post_json(BULK, [spec])
    body = response.json()
    if body["created"] == 1:
        assert response.status_code == 201 and body["errors"] == []
        return None
    assert response.status_code == 400, body
    (field,) = {error["field"] for error in body["errors"]}
    return field


class Unbuildable(Exception):
    """The Python value of an argument cannot be built (its type refuses it)."""

    def __init__(self, argument: str) -> None:
        super().__init__(argument)
        self.argument = argument


def python_arguments(spec: dict) -> tuple[Callable, str, dict]:
    """``(function, task name, keyword arguments)``: ``spec`` as a Python API call."""
    spec = dict(spec)
    task_name = spec.pop("job_type")
    arguments: dict[str, object] = {}
    for key, value in spec.items():
        if key == "cron_expression":
            arguments["cron"] = value
        elif key == "delay_ms":
            arguments["delay"] = (timedelta(milliseconds=value)
                                  if type(value) is int else value)
        elif key == "run_at":
            arguments["at"] = _datetime_or_text(value)
        elif key == "retry_policy":
            arguments["retry"] = _built("retry", RetryPolicy, value)
        elif key == "overlap_policy":
            arguments["overlap"] = value
        elif key in ("misfire_policy", "misfire_fire_all_limit"):
            continue
        else:
            arguments[key] = value
    if "misfire_policy" in spec:
        policy = spec["misfire_policy"]
        if "misfire_fire_all_limit" in spec:
            arguments["misfire"] = _built("misfire", lambda: MisfireRule(
                MisfirePolicy(policy), spec["misfire_fire_all_limit"]))
        else:
            arguments["misfire"] = policy
    function = api.schedule_cron if "cron" in arguments else api.schedule_once
    return function, task_name, arguments


def _datetime_or_text(value: str) -> object:
    try:
        if "\x00" not in value:
            return datetime.fromisoformat(value)
    except ValueError:
        pass
    return value  # not a datetime: the API is given the text itself


def _built(argument: str, build: Callable, value: object = None) -> object:
    try:
        if isinstance(value, dict):
            return build(**value)
        return build() if value is None else value
    except (TypeError, ValueError):
        raise Unbuildable(argument) from None


def python(tenant, spec: dict) -> str | None:
    """The Python argument the Python API refuses ``spec`` on; None when it creates it."""
    try:
        function, task_name, arguments = python_arguments(spec)
    except Unbuildable as exc:
        return exc.argument
    try:
        with transaction.atomic():
            function(task_name, tenant=tenant, **arguments)
    except (InvalidJob, InvalidSchedule, TaskNotGranted) as exc:
        assert exc.field, exc
        return exc.field
    return None


def names(argument: str | None, rest_field: str | None) -> bool:
    """Whether the Python argument and the REST field name the same thing."""
    if argument is None or rest_field is None:
        return argument is rest_field
    return rest_field.partition(".")[0] in ARGUMENT_FIELDS.get(argument, {argument})


@pytest.mark.filterwarnings("ignore:max_retries= is deprecated:DeprecationWarning")
@pytest.mark.parametrize("case", CREATES, ids=[case.id for case in CREATES])
def test_the_python_api_and_rest_single_and_bulk_accept_and_refuse_a_spec_alike(
    tenant_api, tenant, granted, case
):
    granted(case.grants)
    single = rest_single(tenant_api, case.resolved())
    bulk = rest_bulk(tenant_api, case.resolved())
    argument = python(tenant, case.resolved())
    assert single == bulk == case.field, (single, bulk)
    assert names(argument, case.field), (argument, case.field)
    expected_jobs = 0 if case.field else 3
    assert Job.objects.filter(tenant=tenant).count() == expected_jobs


@pytest.mark.parametrize(("case", "why_not_python"), REST_ONLY,
                         ids=[case.id for case, _ in REST_ONLY])
def test_specs_the_python_api_cannot_state_are_refused_by_rest_single_and_bulk_alike(
    tenant_api, case, why_not_python
):
    assert rest_single(tenant_api, case.resolved()) == case.field
    assert rest_bulk(tenant_api, case.resolved()) == case.field
    assert not Job.objects.exists()


def test_every_rule_has_a_valid_and_an_invalid_case():
    """The table is not a sample: each rule is shown accepting and refusing."""
    outcomes: dict[str, set[bool]] = {}
    for case in CREATES:
        outcomes.setdefault(case.rule, set()).add(case.field is None)
    assert {rule for rule, seen in outcomes.items() if seen != {True, False}} == set()
    assert len(outcomes) == 15, sorted(outcomes)


# ------------------------------------------------------------------------------------- changes


@dataclasses.dataclass(frozen=True)
class Change:
    id: str
    job: dict  # the job, as created over REST
    change: dict  # the PATCH body
    field: str | None
    status: str | None = None  # a status to put the job in first


CHANGES = [
    Change("run-at", ONCE, {"run_at": iso_in(3_600)}, None),
    Change("run-at-in-the-past", ONCE, {"run_at": iso_in(-600)}, "run_at"),
    Change("run-at-of-a-cron-job", CRON, {"run_at": iso_in(3_600)}, "run_at"),
    Change("cron", CRON, {"cron_expression": "0 * * * *"}, None),
    Change("cron-of-a-one-time-job", ONCE, {"cron_expression": "0 * * * *"}, "cron_expression"),
    Change("cron-out-of-range", CRON, {"cron_expression": "0 25 * * *"}, "cron_expression"),
    Change("cron-with-a-nul", CRON, {"cron_expression": "0 * * * *\x00"}, "cron_expression"),
    Change("zone-unknown", CRON, {"timezone": "Mars/Olympus"}, "timezone"),
    Change("cron-leaving-no-room-for-the-jitter", CRON | {"jitter_ms": 120_000},
           {"cron_expression": "* * * * *"}, "jitter_ms"),
    Change("retry-policy", ONCE, {"retry_policy": POLICY}, None),
    Change("retry-policy-over-its-bounds", ONCE,
           {"retry_policy": POLICY | {"multiplier": 101.0}}, "retry_policy.multiplier"),
    Change("timeouts", ONCE | {"hard_timeout_ms": 3_000}, {"soft_timeout_ms": 2_000}, None),
    Change("soft-timeout-above-the-kept-hard", ONCE | {"hard_timeout_ms": 3_000},
           {"soft_timeout_ms": 4_000}, "soft_timeout_ms"),
    Change("timeout-over-a-day", ONCE, {"hard_timeout_ms": 86_400_001}, "hard_timeout_ms"),
    Change("overlap", CRON, {"overlap_policy": "allow"}, None),
    Change("overlap-of-a-one-time-job", ONCE, {"overlap_policy": "allow"}, "overlap_policy"),
    Change("overlap-unknown", CRON, {"overlap_policy": "sometimes"}, "overlap_policy"),
    Change("misfire", CRON, {"misfire_policy": "fire_all", "misfire_fire_all_limit": 3}, None),
    Change("fire-all-limit-over-1000", CRON,
           {"misfire_policy": "fire_all", "misfire_fire_all_limit": 1_001},
           "misfire_fire_all_limit"),
    Change("jitter", CRON, {"jitter_ms": 10_000}, None),
    Change("jitter-of-a-one-time-job", ONCE, {"jitter_ms": 10}, "jitter_ms"),
    Change("jitter-not-below-the-period", CRON, {"jitter_ms": 300_000}, "jitter_ms"),
    Change("a-cancelled-job", CRON, {"cron_expression": "0 * * * *"}, "status",
           status=JobStatus.CANCELLED),
]


def rest_patch(tenant_api, job_id: str, change: dict) -> str | None:
    response = tenant_api.patch_json(f"{JOBS}{job_id}/", change)
    if response.status_code == 200:
        return None
    if response.status_code == 409:  # an ended job: {"detail": ...}
        return "status"
    assert response.status_code == 400, response.content
    (field,) = response.json()
    return field


def python_change(tenant, job: Job, change: dict) -> str | None:
    """``change`` through ``reschedule`` (when) or ``configure`` (how)."""
    when = {"cron_expression": "cron", "timezone": "timezone", "run_at": "at"}
    try:
        if change.keys() <= when.keys():
            arguments = {when[key]: _datetime_or_text(value) if key == "run_at" else value
                         for key, value in change.items()}
            api.reschedule(job.job_id, tenant=tenant, **arguments)
            return None
        arguments = {}
        if "retry_policy" in change:
            arguments["retry"] = RetryPolicy(**change["retry_policy"])
        if change.keys() & {"soft_timeout_ms", "hard_timeout_ms"}:
            arguments["timeouts_ms"] = (change.get("soft_timeout_ms", job.soft_timeout_ms),
                                        change.get("hard_timeout_ms", job.hard_timeout_ms))
        if "overlap_policy" in change:
            arguments["overlap"] = change["overlap_policy"]
        if "misfire_policy" in change:
            arguments["misfire"] = MisfireRule(MisfirePolicy(change["misfire_policy"]),
                                               change["misfire_fire_all_limit"])
        if "jitter_ms" in change:
            arguments["jitter_ms"] = change["jitter_ms"]
        api.configure(job.job_id, tenant=tenant, **arguments)
    except (InvalidJob, InvalidSchedule, TaskNotGranted) as exc:
        return exc.field
    return None


def _job_as_created(tenant_api, case: Change) -> Job:
    response = tenant_api.post_json(JOBS, case.job)
    assert response.status_code == 201, response.json()
    job_id = response.json()["job_id"]
    if case.status is not None:
        Job.objects.filter(job_id=job_id).update(status=case.status)
    return Job.objects.get(job_id=job_id)


@pytest.mark.parametrize("case", CHANGES, ids=[case.id for case in CHANGES])
def test_a_patch_and_the_python_api_accept_and_refuse_a_change_alike(tenant_api, tenant, case):
    resolved = {key: value() if callable(value) else value for key, value in case.change.items()}
    by_rest = _job_as_created(tenant_api, case)
    before = Job.objects.get(pk=by_rest.pk).updated_at
    assert rest_patch(tenant_api, str(by_rest.job_id), resolved) == case.field
    by_python = _job_as_created(tenant_api, case)
    argument = python_change(tenant, by_python, resolved)
    assert names(argument, case.field), (argument, case.field)
    if case.field is not None:  # a refused change changes nothing
        assert Job.objects.get(pk=by_rest.pk).updated_at == before


# --------------------------------------------------------------------------------- idempotency


def test_one_idempotency_key_twice_makes_one_job_by_either_way(tenant_api, tenant):
    first = tenant_api.post_json(JOBS, ONCE, **{"Idempotency-Key": "order-7"})
    again = tenant_api.post_json(JOBS, ONCE, **{"Idempotency-Key": "order-7"})
    assert again.json()["job_id"] == first.json()["job_id"]
    bulk = tenant_api.post_json(BULK, [ONCE], **{"Idempotency-Key": "order-8"})
    assert tenant_api.post_json(BULK, [ONCE], **{"Idempotency-Key": "order-8"}).json() == \
        bulk.json()
    job = api.schedule_once("tests.noop", tenant=tenant, delay=60, idempotency_key="order-7")
    assert api.schedule_once("tests.noop", tenant=tenant, delay=60,
                             idempotency_key="order-7").job_id == job.job_id
    assert Job.objects.filter(tenant=tenant).count() == 3


@pytest.mark.parametrize(("key", "accepted"), [
    ("k" * 200, True), ("k" * 201, False), ("", False), ("order\x007", False),
    ("order\x1b7", False),
])
def test_an_idempotency_key_is_accepted_or_refused_alike(tenant_api, tenant, key, accepted):
    for path, body, first in ((JOBS, ONCE, "s"), (BULK, [ONCE], "b")):
        # A key of the same shape per endpoint (one key on two endpoints is a 422 of its own).
        response = tenant_api.post_json(path, body, **{"Idempotency-Key": first + key[1:]
                                                       if key else key})
        if accepted:
            assert response.status_code == 201, response.content
        else:
            assert response.status_code == 400 and list(response.json()) == ["Idempotency-Key"]
    try:
        api.schedule_once("tests.noop", tenant=tenant, delay=60, idempotency_key=key)
    except InvalidJob as exc:
        assert not accepted and exc.field == "idempotency_key", exc
    else:
        assert accepted
