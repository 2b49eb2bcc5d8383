"""Schedule changes reach the running beat at once: no restart, next occurrence."""

from __future__ import annotations

import time

import pytest

from scheduler import api
from scheduler.clock import datetime_to_ms, now_ms
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_cron_edit_and_a_pause_take_effect_on_the_next_occurrence(platform, tenant):
    with platform.together():
        beat = platform.start_beat()
        platform.start_worker()
    job = api.schedule_cron("e2e.record_run", tenant=tenant, cron="* * * * * *",
                            queue=platform.queue)
    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").count() >= 2, timeout_s=20)

    edited_ms = now_ms()
    api.reschedule(job.job_id, tenant=tenant, cron="*/3 * * * * *", by="test")
    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").count() >= 5,
                    timeout_s=30)
    after_edit = sorted(datetime_to_ms(e.scheduled_for) for e in job.executions.all()
                        if datetime_to_ms(e.scheduled_for) > edited_ms + 1_000)
    assert len(after_edit) >= 2
    assert all(ms % 3_000 == 0 for ms in after_edit), after_edit  # the new schedule only

    api.pause(job.job_id, tenant=tenant, by="test")
    paused_ms = now_ms()
    count = job.executions.count()
    time.sleep(3.5)
    assert not [e for e in job.executions.all()
                if datetime_to_ms(e.scheduled_for) > paused_ms + 1_000], "fired while paused"
    assert job.executions.count() <= count + 1  # at most the occurrence already in flight

    api.resume(job.job_id, tenant=tenant, by="test")
    assert wait_for(lambda: job.executions.filter(status="SUCCEEDED").count() >= count + 2,
                    timeout_s=20)
    assert beat.popen.poll() is None, "the beat was never restarted"
