"""A job whose task the worker does not know ends FAILED with a reason naming the task and the
worker; it used to stay DISPATCHED for ever, with only a KeyError in the worker's log."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler import api
from scheduler.models import Execution, ExecutionStatus
from search.models import AuditEvent
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_unregistered_task_ends_failed_naming_the_task_and_the_worker(platform, tenant):
    with platform.together():
        platform.start_beat()
        worker = platform.start_worker(name="knows-little")
    job = api.schedule_once("no.such.task", tenant=tenant, queue=platform.queue,
                            delay=timedelta(milliseconds=200))

    def ended() -> Execution | None:
        return Execution.objects.filter(job_id=job.job_id).exclude(
            status__in=[ExecutionStatus.SCHEDULED, ExecutionStatus.DISPATCHED]).first()

    assert wait_for(lambda: ended() is not None, timeout_s=30), worker.log_tail()
    execution = ended()
    assert execution.status == ExecutionStatus.FAILED
    assert "'no.such.task' is not registered on worker knows-little@" in execution.error
    assert execution.reason == "task not registered on worker"
    assert execution.finished_at is not None
    assert AuditEvent.objects.filter(execution_id=execution.execution_id,
                                     action="execution.failed").exists()
