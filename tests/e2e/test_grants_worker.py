"""Defence in depth: a worker refuses a Chrono message whose tenant is not granted its task,
even when the message reached the queue (here: scheduled while granted, the grant removed
before it fired). The execution ends FAILED with the reason; the task's body never runs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chronocore import grants
from chronocore.config import get_config
from scheduler import api
from scheduler.models import Execution, ExecutionStatus
from search.models import AuditEvent
from tests.helpers import runs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True),
              pytest.mark.no_default_grants]


def _ended(job_id) -> Execution | None:
    return Execution.objects.filter(job_id=job_id).exclude(
        status__in=[ExecutionStatus.SCHEDULED, ExecutionStatus.DISPATCHED]).first()


def test_a_worker_refuses_a_message_whose_grant_was_removed_before_it_fired(
    platform, tenant, other_tenant
):
    grants.grant(tenant, "e2e.*", platform.queue)
    grants.grant(other_tenant, "e2e.*", platform.queue)
    with platform.together():
        platform.start_beat()
        worker = platform.start_worker(name="guard")
    # The worker read the grants when it started and renews them every half TTL (5 s): a
    # revocation reaches it within the TTL, so the jobs fire past it.
    fire_in = timedelta(milliseconds=get_config().grant_cache_ttl_ms + 1_500)
    refused = api.schedule_once("e2e.record_run", tenant=tenant, queue=platform.queue,
                                delay=fire_in, kwargs={"label": "refused"})
    allowed = api.schedule_once("e2e.record_run", tenant=other_tenant, queue=platform.queue,
                                delay=fire_in, kwargs={"label": "allowed"})
    grants.revoke(tenant, "e2e.*", platform.queue)

    assert wait_for(lambda: _ended(refused.job_id) and _ended(allowed.job_id), timeout_s=40), \
        worker.log_tail()
    execution = _ended(refused.job_id)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.reason == "task not granted to the tenant"
    assert "not granted task 'e2e.record_run' on queue" in execution.error
    assert execution.execution_id.hex not in {k.replace("-", "") for k in runs(platform.redis)}
    assert AuditEvent.objects.filter(execution_id=execution.execution_id,
                                     action="execution.failed").exists()
    ran = _ended(allowed.job_id)
    assert ran.status == ExecutionStatus.SUCCEEDED  # the other tenant, still granted, ran
    assert runs(platform.redis).get(str(ran.execution_id)) == 1
