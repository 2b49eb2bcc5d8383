"""``engine.start_runs`` starts many runs in one transaction as ``start_run`` starts one: the
same admission, idempotency and audit, the first steps' jobs and timers written together."""

from __future__ import annotations

import pytest

from scheduler.models import Job
from scheduler.timers import shard_keys, timer_store
from search.models import AuditEvent
from workflows import engine
from workflows.engine import RunRequest
from workflows.errors import WorkflowError
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)

CHAIN = {"name": "two", "steps": [{"key": "a", "task": "t.a"},
                                  {"key": "b", "task": "t.b", "parents": ["a"]}]}


def _timed(job_ids: set[str]) -> set[str]:
    """The ids among ``job_ids`` with a timer in their shard's due set."""
    store = timer_store()
    return {job_id for job_id in job_ids
            if store.client.zscore(shard_keys(store.shard_of(job_id))[0], job_id) is not None}


def test_start_runs_starts_every_run_with_its_first_step_job_and_timer(tenant, redis_client):
    engine.define(tenant, CHAIN)
    runs = engine.start_runs([RunRequest("two", run_input={"n": n}) for n in range(5)],
                             tenant=tenant, by="tests")
    assert [run.input for run in runs] == [{"n": n} for n in range(5)]
    assert len({run.run_id for run in runs}) == 5
    stored = WorkflowRun.objects.filter(run_id__in=[r.run_id for r in runs])
    assert {r.status for r in stored} == {"RUNNING"}
    assert {r.state["steps"]["a"]["status"] for r in stored} == {"READY"}
    jobs = {str(engine.task_job_id(r.run_id, engine.StepRef("a"), 1)) for r in runs}
    assert {str(j) for j in Job.objects.filter(job_id__in=jobs).values_list("job_id",
                                                                           flat=True)} == jobs
    assert _timed(jobs) == jobs
    started = AuditEvent.objects.filter(action="workflow.run_started")
    assert started.count() == 5


def test_start_runs_keeps_idempotency_keys_within_the_call_and_across_calls(tenant, redis_client):
    engine.define(tenant, CHAIN)
    first = engine.start_run("two", tenant=tenant, idempotency_key="k1")
    runs = engine.start_runs([RunRequest("two", idempotency_key="k1"),
                              RunRequest("two", idempotency_key="k2"),
                              RunRequest("two", idempotency_key="k2")], tenant=tenant)
    assert runs[0].run_id == first.run_id
    assert runs[1].run_id == runs[2].run_id != first.run_id
    assert WorkflowRun.objects.filter(tenant=tenant).count() == 2


def test_start_runs_queues_the_runs_past_the_concurrency_limit(tenant, redis_client):
    engine.define(tenant, {**CHAIN, "max_concurrent_runs": 2})
    engine.start_run("two", tenant=tenant)
    runs = engine.start_runs([RunRequest("two") for _ in range(3)], tenant=tenant)
    assert [WorkflowRun.objects.get(run_id=r.run_id).status for r in runs] == \
        ["RUNNING", "QUEUED", "QUEUED"]
    assert runs[1].reason["code"] == "concurrency_limit"


def test_start_runs_writes_nothing_when_one_workflow_is_unknown(tenant, redis_client):
    engine.define(tenant, CHAIN)
    with pytest.raises(engine.WorkflowNotFound, match="'nope'"):
        engine.start_runs([RunRequest("two"), RunRequest("nope")], tenant=tenant)
    assert not WorkflowRun.objects.filter(tenant=tenant).exists()


def test_start_runs_refuses_what_is_not_a_run_request(tenant):
    with pytest.raises(WorkflowError, match="RunRequest"):
        engine.start_runs([{"name": "two"}], tenant=tenant)
    assert engine.start_runs([], tenant=tenant) == []


def test_start_runs_looks_each_workflow_up_once(tenant, redis_client,
                                                django_assert_max_num_queries):
    engine.define(tenant, CHAIN)
    with django_assert_max_num_queries(12):  # not one look-up per run
        runs = engine.start_runs([RunRequest("two") for _ in range(50)], tenant=tenant)
    assert len(runs) == 50
