"""A delivery that may not run (its task not granted, or not registered on the worker) ends
FAILED even when its message outran the beat's record of the publish: the worker reads the
execution SCHEDULED, the recorder marks it DISPATCHED, and the end, conditional on the status
read, must be tried again rather than leave the execution DISPATCHED for ever (what the
end-to-end grants test saw under load)."""

from __future__ import annotations

import uuid

import pytest

from scheduler import api, attempts, occurrences
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution, ExecutionStatus

pytestmark = pytest.mark.django_db(transaction=True)


def _scheduled(tenant) -> tuple[str, int]:
    job = api.schedule_once("chrono.noop", tenant=tenant, delay=0)
    fire_ms = datetime_to_ms(job.next_run_at)
    occurrences.load_and_insert([(str(job.job_id), fire_ms)])
    return str(execution_id_for(str(job.job_id), fire_ms)), fire_ms


@pytest.fixture
def recorder_between_read_and_end(monkeypatch):
    """The beat's recorder runs once, between the worker's read and its first end."""
    real_end = attempts.end_attempt
    calls = []

    def end_attempt(execution_id, **kwargs):
        if not calls:
            fire_ms = datetime_to_ms(kwargs["scheduled_for"])
            occurrences.record_dispatched([(uuid.UUID(execution_id), fire_ms, now_ms())],
                                          advances=[])
        calls.append(kwargs["from_status"])
        return real_end(execution_id, **kwargs)

    monkeypatch.setattr(attempts, "end_attempt", end_attempt)
    return calls


@pytest.mark.parametrize("fail", [attempts.fail_ungranted_task, attempts.fail_unregistered_task])
def test_a_refused_delivery_ends_failed_when_the_recorder_marks_it_dispatched_meanwhile(
    tenant, recorder_between_read_and_end, fail
):
    execution_id, fire_ms = _scheduled(tenant)
    kwargs = {"message": "not granted"} if fail is attempts.fail_ungranted_task else {
        "task_name": "no.such.task"}
    assert fail(execution_id, attempt=1, worker_id="w1", **kwargs) is True
    assert recorder_between_read_and_end == ["SCHEDULED", "DISPATCHED"]
    execution = Execution.objects.get(pk=execution_id)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.dispatched_at is not None  # the recorder's write kept


def test_a_delivery_already_ended_is_not_ended_again(tenant):
    execution_id, _ = _scheduled(tenant)
    assert attempts.fail_ungranted_task(execution_id, attempt=1, message="not granted",
                                        worker_id="w1") is True
    assert attempts.fail_ungranted_task(execution_id, attempt=1, message="not granted",
                                        worker_id="w1") is False
    assert Execution.objects.get(pk=execution_id).status == ExecutionStatus.FAILED
