"""An execution that ended badly runs once more when retried by hand (REST API or the admin's
button): as its next attempt, fired by the beat through a retry timer, recorded and audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scheduler import api
from scheduler.errors import ExecutionNotRetryable
from scheduler.models import Execution, ExecutionStatus
from search import audit
from search.models import AuditEvent
from tests.e2e.tasks import RUNS_KEY
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _failed_execution(platform, tenant) -> Execution:
    job = api.schedule_once("e2e.fail", tenant=tenant, queue=platform.queue,
                            delay=timedelta(milliseconds=100))
    assert wait_for(lambda: Execution.objects.filter(
        job_id=job.job_id, status=ExecutionStatus.FAILED).exists(), timeout_s=30)
    return Execution.objects.get(job_id=job.job_id)


def _runs(platform, execution: Execution) -> int:
    return int(platform.redis.hget(RUNS_KEY, str(execution.execution_id)) or 0)


def test_retrying_a_failed_execution_runs_it_again_as_its_next_attempt(platform, tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker()
    execution = _failed_execution(platform, tenant)
    assert _runs(platform, execution) == 1

    attempt = api.retry_execution(execution.execution_id, tenant=tenant, by="user:ops")
    assert attempt == 2
    assert wait_for(lambda: _runs(platform, execution) == 2, timeout_s=30)
    assert wait_for(lambda: Execution.objects.get(pk=execution.pk).status
                    == ExecutionStatus.FAILED, timeout_s=10)
    execution.refresh_from_db()
    assert execution.attempt == 2
    assert AuditEvent.objects.filter(execution_id=execution.execution_id,
                                     action=audit.EXECUTION_RETRIED, actor="user:ops").exists()


def test_an_execution_that_has_not_ended_badly_is_not_retried(platform, tenant):
    job = api.schedule_once("e2e.record_run", tenant=tenant, queue=platform.queue,
                            delay=timedelta(minutes=5))
    execution = Execution.objects.create(job=job, tenant=tenant, scheduled_for=job.next_run_at,
                                         status=ExecutionStatus.RUNNING)
    with pytest.raises(ExecutionNotRetryable, match="RUNNING"):
        api.retry_execution(execution.execution_id, tenant=tenant)
    execution.refresh_from_db()
    assert (execution.status, execution.attempt) == (ExecutionStatus.RUNNING, 1)


def test_the_admin_button_and_the_rest_endpoint_retry_and_refuse_what_has_not_failed(
        platform, tenant, other_tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker()
    execution = _failed_execution(platform, tenant)
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="x"))
    page = staff.get(f"/admin/scheduler/execution/{execution.execution_id}/change/")
    assert 'id="execution-retry"' in page.content.decode()
    answer = staff.post(f"/admin/scheduler/execution/{execution.execution_id}/retry/",
                        follow=True)
    assert "attempt 2 is on its way" in answer.content.decode()
    assert wait_for(lambda: _runs(platform, execution) == 2, timeout_s=30)
    assert wait_for(lambda: Execution.objects.get(pk=execution.pk).status
                    == ExecutionStatus.FAILED, timeout_s=10)

    from chronocore.models import ApiKey, generate_api_key, hash_api_key

    def key_of(owner) -> str:
        prefix, full = generate_api_key()
        ApiKey.objects.create(tenant=owner, name="t", prefix=prefix, key_hash=hash_api_key(full))
        return full

    url = f"/api/v1/executions/{execution.execution_id}/retry/"
    stranger = Client().post(url, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {key_of(other_tenant)}")
    assert stranger.status_code == 404
    owner = Client().post(url, content_type="application/json",
                          HTTP_AUTHORIZATION=f"Bearer {key_of(tenant)}")
    assert owner.status_code == 200 and owner.json()["attempt"] == 3
    assert wait_for(lambda: _runs(platform, execution) == 3, timeout_s=30)
    succeeded = api.schedule_once("e2e.record_run", tenant=tenant, queue=platform.queue,
                                  delay=timedelta(milliseconds=50))
    assert wait_for(lambda: Execution.objects.filter(
        job_id=succeeded.job_id, status=ExecutionStatus.SUCCEEDED).exists(), timeout_s=30)
    done = Execution.objects.get(job_id=succeeded.job_id)
    refused = Client().post(f"/api/v1/executions/{done.execution_id}/retry/",
                            content_type="application/json",
                            HTTP_AUTHORIZATION=f"Bearer {key_of(tenant)}")
    assert refused.status_code == 409 and "SUCCEEDED" in refused.json()["detail"]
