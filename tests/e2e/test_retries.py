"""Long retry delays travel through the timer store and are fired by the beat."""

from __future__ import annotations

import pytest

from scheduler import api
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.lifecycle import RETRY_TIMER_SEPARATOR
from scheduler.models import Execution, ExecutionStatus
from scheduler.timers import timer_store
from tests.helpers import attempts_log, runs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_attempt_waiting_in_the_timer_store_is_published_by_the_beat(platform, tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker()
    job = api.schedule_once("e2e.record_run", tenant=tenant, delay=0.2, queue=platform.queue)
    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").exists(), timeout_s=20)
    execution = job.executions.get()
    # As a worker leaves an attempt whose backoff is beyond the largest RabbitMQ tier:
    retry_at = now_ms() + 1_500
    Execution.objects.filter(pk=execution.pk).update(
        status=ExecutionStatus.RETRY_WAIT, attempt=2, retry_at=ms_to_datetime(retry_at))
    timer_store().add([(f"{execution.execution_id}{RETRY_TIMER_SEPARATOR}2", retry_at)])

    assert wait_for(lambda: Execution.objects.filter(pk=execution.pk, attempt=2,
                                                     status="SUCCEEDED").exists(), timeout_s=20)
    execution.refresh_from_db()
    assert execution.started_at >= ms_to_datetime(retry_at)
    assert runs(platform.redis)[str(execution.execution_id)] == 2
    assert [a for e, a, _ in attempts_log(platform.redis)
            if e == str(execution.execution_id)] == [1, 2]
    # The retry timer is acknowledged by the beat's recorder (every 20 ms), maybe after the
    # attempt already ran.
    assert wait_for(lambda: timer_store().pending_count() == 0, timeout_s=5)
