"""Property-based fuzzing of the OpenAPI schema with schemathesis, in process (WSGI).

Every documented operation gets generated requests (valid and invalid), as a tenant for the
tenant endpoints and as a staff user for the platform ones. No answer may be a server error, and
every answer must match the schema: a documented status, content type, headers and body.

A second run authenticates with another tenant's key and fills every path parameter with the
first tenant's real ids (its job, execution, workflow and version, run, API key, task grant,
tenant id, a worker): each request must get 404 on a tenant endpoint and 403 on a platform one,
with the very answer an id that does not exist gets, so the other tenant cannot even tell that
the object exists.
"""

from __future__ import annotations

import json
import re
import uuid
import zlib
from contextlib import contextmanager

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from chronoadmin.wsgi import application

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 30
# The cross-tenant run's path parameters are fixed (the first tenant's ids), so fewer examples
# cover its bodies, queries and headers; each example makes two requests.
CROSS_TENANT_MAX_EXAMPLES = 20
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
CSRF_TOKEN = "fuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzz"  # 32 characters: a valid unmasked secret


@contextmanager
def keep_the_test_connection():
    """As Django's test client does: a request must not close the connection that holds the
    test's transaction (the test client reconnects these handlers after each of its requests,
    so they are taken off around every call)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def unlimited_rate(chrono_config):
    """No tenant rate limit for the test's requests: set once for all its examples (each
    setting clears the cached config, which the next request then reads again)."""
    chrono_config(api_rate_per_minute=1_000_000)


@pytest.fixture
def staff_cookies(db):
    from tests.integration.conftest import platform_staff_user

    client = Client()
    client.force_login(platform_staff_user("fuzz"))
    return {"sessionid": client.cookies["sessionid"].value, "csrftoken": CSRF_TOKEN}


schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
# Operations with path parameters, and valid requests only (an invalid body can be refused with
# 400 before the object is looked up, for any id alike; the first run covers those).
cross_tenant_schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
cross_tenant_schema.config.generation.update(modes=[schemathesis.GenerationMode.POSITIVE])
cross_tenant_schema = cross_tenant_schema.include(path_regex=r"\{")


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value) -> bytes:
    """The bulk endpoint's NDJSON body: one JSON value a line."""
    lines = value if isinstance(value, list) else [value]
    return b"\n".join(json.dumps(line).encode() for line in lines)


# The coverage phase (schemathesis's deterministic cases, sent before the MAX_EXAMPLES random
# ones) tries every boundary and wrong type of every field of a body. The job body is a oneOf of
# four kinds of job that share most of their fields, so each value of a shared field was sent
# four times: 1,007 requests for POST /jobs/, and 2,015 for the bulk endpoint, whose items are
# that body, sent again as NDJSON: a third of this file's time for these two operations. Each
# value of a shared field is now sent to a one-time job and to a recurring job (the two kinds
# the validator tells apart), alternating between the two kinds of each: 577 and 598 requests.
# Every value of a field of one kind only, and every other case, is sent as before.
JOB_BODY_OPERATIONS = ["POST /api/v1/jobs/", "POST /api/v1/jobs/bulk/"]
# Each kind by the field that makes it (the one its member of the oneOf requires).
KIND_PAIRS = (("run_at", "delay_ms"), ("cron_expression", "interval_ms"))


def _fields_of_each_kind() -> dict[str, frozenset[str]]:
    components = schema.raw_schema["components"]["schemas"]
    kinds = {}
    for ref in components["JobCreateRequest"]["oneOf"]:
        member = components[ref["$ref"].rsplit("/", 1)[1]]
        (kind,) = set(member["required"]) - {"job_type"}
        kinds[kind] = frozenset(member["properties"])
    return kinds


FIELDS_OF_KIND = _fields_of_each_kind()
JOB_FIELDS = frozenset().union(*FIELDS_OF_KIND.values())
# The fields both kinds of a pair take, but timezone (a cron job's zone, an interval job's
# display zone).
SHARED_FIELDS = tuple(FIELDS_OF_KIND[a] & FIELDS_OF_KIND[b] - {"timezone"} for a, b in KIND_PAIRS)


def _kind(job: object) -> tuple[int, int] | None:
    """(0 one-time or 1 recurring, which kind of the pair) of a job body, or None."""
    if not isinstance(job, dict):
        return None
    kinds = [(pair, member) for pair, fields in enumerate(KIND_PAIRS)
             for member, field in enumerate(fields) if field in job]
    return kinds[0] if len(kinds) == 1 else None


@schema.hook.apply_to(name=JOB_BODY_OPERATIONS)
def filter_case(ctx, case) -> bool:
    phase = case.meta.phase if case.meta else None
    if phase is None or phase.name != "coverage":
        return True  # examples and the random phase are left as they are
    body = case.body
    if case.media_type == "application/x-ndjson":
        # A list of job objects reads, line by line, as the very list the application/json
        # cases send (the two media types share the schema): keep what only NDJSON reads its
        # own way (a body that is no list, one holding no job or something other than objects).
        return not (isinstance(body, list) and body and all(isinstance(i, dict) for i in body))
    data = phase.data
    kind = _kind(body[0] if isinstance(body, list) and len(body) == 1 else body)
    if data.parameter_location != "body" or kind is None:
        return True
    location = data.location or ""
    # The fields the case is about, from its location (a wrong value: the top-level field
    # first) or else its description (a valid one: "Object with valid 'retry_policy' value: …").
    named = (re.findall(r"/properties/([^/]+)", location)
             or re.findall(r"'([^']+)'", data.description))
    shared = SHARED_FIELDS[kind[0]]
    if not named or named[0] not in shared or not set(named) & JOB_FIELDS <= shared:
        return True  # the whole object, or a field not both kinds of the pair take
    # The same case in every kind alike (the kind's member of the oneOf out of its location).
    variant = "|".join((str(kind[0]), data.scenario, data.description,
                        re.sub(r"/oneOf/\d+", "", location)))
    return zlib.crc32(variant.encode()) % 2 == kind[1]


@pytest.fixture
def existing_ids(tenant_api, staff_cookies):
    """Real ids for the path parameters, so detail paths are fuzzed on objects that exist."""
    from django.utils import timezone

    from chronocore.models import ApiKey
    from reaper.models import Worker
    from scheduler.models import Execution, Job

    job_id = tenant_api.create_job(name="fuzzed")["job_id"]
    execution = Execution.objects.create(
        job=Job.objects.get(job_id=job_id), tenant=tenant_api.tenant,
        scheduled_for=timezone.now())
    Worker.objects.create(worker_id="fuzz-worker", queue_name="chrono",
                          last_heartbeat_at=timezone.now())
    return {
        "job_id": job_id,
        "execution_id": str(execution.execution_id),
        "tenant_id": str(tenant_api.tenant.tenant_id),
        "key_id": str(ApiKey.objects.get(tenant=tenant_api.tenant).key_id),
        "worker_id": "fuzz-worker",
    }


@schema.parametrize()
# Derandomized: every run of the suite tries the same examples, so CI is repeatable. When the
# API changes, explore further by hand with derandomize=False and a larger MAX_EXAMPLES.
@settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_operation_answers_a_server_error_or_outside_its_schema(
    case, tenant_api, staff_cookies, existing_ids, unlimited_rate
):
    for name, value in (case.path_parameters or {}).items():
        # Half the generated ids (chosen by the id itself, so Hypothesis can still shrink)
        # become the id of an object that exists.
        if name in existing_ids and len(str(value)) % 2 == 0:
            case.path_parameters[name] = existing_ids[name]
    key = (case.headers or {}).get("Idempotency-Key")
    if key and len(key) % 2:
        # Generated keys repeat across examples with other bodies (422, rightly); make half of
        # them unique so those requests get past the idempotency check and are fuzzed too.
        case.headers["Idempotency-Key"] = f"{key[:150]}-{uuid.uuid4().hex}"
    if "platform" in (case.operation.definition.raw.get("tags") or []):
        case.cookies = dict(staff_cookies)  # in place of the generated session cookie
        headers = {"X-CSRFToken": CSRF_TOKEN}
    else:
        headers = {"Authorization": f"Bearer {tenant_api.full_key}"}
    with keep_the_test_connection():
        case.call_and_validate(checks=CHECKS, headers=headers)


@pytest.fixture
def first_tenant_ids(tenant_api, existing_ids):
    """Every kind of id a path can hold, of objects of the first tenant (and a worker)."""
    from chronocore.models import TaskGrant
    from scheduler.models import Calendar
    from workflows import engine

    definition = engine.define(tenant_api.tenant, {"name": "fuzz-flow", "steps": [
        {"key": "a", "task": "tests.noop"}]}, by="fuzz")
    run = engine.start_run("fuzz-flow", tenant=tenant_api.tenant, by="fuzz")
    # "name" is a calendar's too (/api/v1/calendars/{name}/): one of that name exists.
    Calendar.objects.create(tenant=tenant_api.tenant, name=definition.name,
                            rules=["* * SAT,SUN"])
    return {
        **existing_ids,
        "name": definition.name,
        "version": str(definition.version),
        "run_id": str(run.run_id),
        "id": str(TaskGrant.objects.filter(tenant=tenant_api.tenant).first().pk),
    }


def unknown_like(name: str, value: str) -> str:
    """An id of the same shape as ``value`` that names nothing."""
    if name == "version":
        return value  # of a workflow name that does not exist: unknown all the same
    if name == "id":
        return str(int(value) + 1_000_000)
    try:
        uuid.UUID(value)
    except ValueError:
        return f"{value}-unknown"
    return str(uuid.uuid4())


@cross_tenant_schema.parametrize()
@settings(max_examples=CROSS_TENANT_MAX_EXAMPLES, deadline=None, database=None,
          derandomize=True, suppress_health_check=list(HealthCheck))
def test_another_tenants_ids_answer_404_or_403_exactly_like_unknown_ids(
    case, other_api, first_tenant_ids, unlimited_rate
):
    real = {name: first_tenant_ids[name] for name in case.path_parameters}
    key = (case.headers or {}).get("Idempotency-Key")
    if key:  # the answer must not depend on an earlier example's use of the key
        case.headers["Idempotency-Key"] = f"{key[:150]}-{uuid.uuid4().hex}"
    headers = {"Authorization": f"Bearer {other_api.full_key}"}
    platform = "platform" in (case.operation.definition.raw.get("tags") or [])
    with keep_the_test_connection():
        case.path_parameters.update(real)
        response = case.call_and_validate(checks=CHECKS, headers=headers)
        case.path_parameters.update({n: unknown_like(n, v) for n, v in real.items()})
        as_unknown = case.call(headers=headers)
    expected = 403 if platform else 404
    assert response.status_code == expected, (case.operation.label, response.text)
    unknown_text = as_unknown.text
    for name, value in real.items():
        unknown_text = unknown_text.replace(unknown_like(name, value), value)
    assert (as_unknown.status_code, unknown_text) == (response.status_code, response.text)
