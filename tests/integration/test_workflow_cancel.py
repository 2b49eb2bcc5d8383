"""Cancelling a run whose fan-out has not started: every instance's job is cancelled in one
batch (``scheduler.api.cancel_many``), not in a transaction per instance."""

from __future__ import annotations

import pytest

from scheduler.models import Job
from scheduler.timers import shard_keys, timer_store
from search.models import AuditEvent
from workflows import engine
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)

WIDE = {"name": "wide", "steps": [
    {"key": "each", "kind": "map", "task": "t.each", "map_over": "input.items",
     "kwargs": {"item": {"$ref": "map.item"}}},
    {"key": "join", "task": "t.join", "parents": ["each"]},
]}
WIDTH = 1_000


def _timed(job_ids: list[str]) -> list[str]:
    store = timer_store()
    return [job_id for job_id in job_ids
            if store.client.zscore(shard_keys(store.shard_of(job_id))[0], job_id) is not None]


def test_cancelling_a_run_cancels_a_thousand_ready_instances_with_a_few_statements(
    tenant, redis_client, django_assert_max_num_queries
):
    engine.define(tenant, WIDE)
    run = engine.start_run("wide", tenant=tenant, run_input={"items": list(range(WIDTH))})
    jobs = [str(engine.task_job_id(run.run_id, engine.StepRef("each", index), 1))
            for index in range(WIDTH)]
    assert Job.objects.filter(job_id__in=jobs, status="ACTIVE").count() == WIDTH
    assert len(_timed(jobs)) == WIDTH

    with django_assert_max_num_queries(30):  # one instance at a time took ~5 per instance
        engine.cancel_run(run.run_id, tenant=tenant, by="user:ops")

    assert WorkflowRun.objects.get(run_id=run.run_id).status == "CANCELLED"
    assert Job.objects.filter(job_id__in=jobs, status="CANCELLED",
                              cancelled_by="user:ops").count() == WIDTH
    assert _timed(jobs) == []
    assert AuditEvent.objects.filter(action="job.cancelled", job_id__in=jobs).count() == WIDTH
    join = engine.task_job_id(run.run_id, engine.StepRef("join"), 1)
    assert not Job.objects.filter(job_id=join).exists()
