"""A worker's start whose commit PostgreSQL made but whose answer a failover lost: tried again,
the start finds the execution running, and the delivery learns the run is its own
(``scheduler.executions.started_by``) rather than skipping it as a duplicate."""

from __future__ import annotations

import uuid

import pytest

from scheduler import api
from scheduler.clock import now_ms
from scheduler.executions import StartRequest, start_executions, started_by
from scheduler.models import Execution

pytestmark = pytest.mark.django_db


def dispatched(tenant) -> Execution:
    job = api.schedule_once("tests.noop", tenant=tenant, delay=60)
    return Execution.objects.create(execution_id=uuid.uuid4(), job=job, tenant=tenant,
                                    scheduled_for=job.next_run_at, status="DISPATCHED")


def test_a_start_tried_again_after_its_commit_is_known_as_its_own_run(tenant):
    execution = dispatched(tenant)
    request = StartRequest(str(execution.execution_id), 1, "w1@q", 60_000, now_ms())
    (first,) = start_executions([request])
    assert first is not None
    assert start_executions([request]) == [None], "the start is not startable twice"
    assert started_by(request) == first


def test_another_delivery_of_the_same_execution_is_not_taken_for_the_one_that_started_it(
        tenant):
    execution = dispatched(tenant)
    request = StartRequest(str(execution.execution_id), 1, "w1@q", 60_000, now_ms())
    assert start_executions([request])[0] is not None
    other_worker = StartRequest(request.execution_id, 1, "w2@q", 60_000, request.at_ms)
    later = StartRequest(request.execution_id, 1, "w1@q", 60_000, request.at_ms + 1)
    next_attempt = StartRequest(request.execution_id, 2, "w1@q", 60_000, request.at_ms)
    assert [started_by(r) for r in (other_worker, later, next_attempt)] == [None, None, None]
