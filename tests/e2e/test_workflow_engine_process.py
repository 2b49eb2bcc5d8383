"""``chrono workflow-engine`` as the only listener (workers started with
``CHRONO_WORKFLOW_ENGINE_IN_WORKER=false``): step ends written while no listener runs wait in
PostgreSQL, and the run goes on once an engine process starts."""

from __future__ import annotations

import pytest

from scheduler.models import ExecutionEnd
from tests.e2e.workflow_tasks import STEP_LOG_KEY
from tests.helpers import wait_for
from workflows import engine
from workflows.models import WorkflowRun

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_ends_wait_for_a_listener_and_an_engine_process_applies_them(platform, tenant):
    platform.redis.delete(STEP_LOG_KEY)
    with platform.together():
        platform.start_beat()
        platform.start_worker(pool="threads", concurrency=4, include=("tests.e2e.workflow_tasks",),
                              workflow_engine_in_worker="false")
    engine.define(tenant, {"name": "two-steps", "steps": [
        {"key": "first", "task": "wf.echo", "kwargs": {"label": "first"}},
        {"key": "second", "task": "wf.echo", "parents": ["first"],
         "kwargs": {"label": "second"}},
    ]})
    run = engine.start_run("two-steps", tenant=tenant, queue=platform.queue)
    assert wait_for(lambda: ExecutionEnd.objects.exists(), timeout_s=30)
    assert not wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).state["steps"]["second"]
                        ["status"] != "PENDING", timeout_s=2), "applied with no listener"
    process = platform.group.start("workflow-engine", ["workflow-engine"])
    process.wait_until(lambda: "workflow engine started" in process.log_tail(), timeout_s=30,
                       what="starting")
    assert wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).status == "SUCCEEDED",
                    timeout_s=30), WorkflowRun.objects.get(pk=run.pk).state
    assert not ExecutionEnd.objects.exists()
    assert [x.decode() for x in platform.redis.lrange(STEP_LOG_KEY, 0, -1)] == ["first",
                                                                                "second"]
