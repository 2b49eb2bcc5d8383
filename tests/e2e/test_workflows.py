"""Workflows with real processes: a beat, a worker (which runs the engine's listener), the
steps as ordinary jobs. Every run ends in the states the rules say, no step body runs twice."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler.models import Execution
from search import audit
from search.models import AuditEvent
from tests.e2e.tasks import RUNS_KEY
from tests.e2e.workflow_tasks import STEP_LOG_KEY
from tests.helpers import wait_for
from workflows import engine
from workflows.models import WorkflowRun

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

def _step(key, task="wf.echo", parents=(), **fields):
    return {"key": key, "task": task, "parents": list(parents),
            "kwargs": {"label": key, **fields.pop("kwargs", {})}, **fields}


def _run_to_end(platform, tenant, spec, run_input=None, timeout_s=60) -> WorkflowRun:
    engine.define(tenant, spec)
    run = engine.start_run(spec["name"], tenant=tenant, run_input=run_input,
                           queue=platform.queue)
    assert wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).finished_at is not None,
                    timeout_s=timeout_s), WorkflowRun.objects.get(pk=run.pk).state
    return WorkflowRun.objects.get(pk=run.pk)


def _statuses(run: WorkflowRun) -> dict[str, str]:
    return {key: step["status"] for key, step in run.state["steps"].items()}


def _step_log(platform) -> list[str]:
    return [x.decode() for x in platform.redis.lrange(STEP_LOG_KEY, 0, -1)]


def test_a_diamond_runs_each_step_once_and_the_join_after_both(workflow_platform, tenant):
    spec = {"name": "diamond", "steps": [
        _step("a"), _step("b", parents=["a"]), _step("c", parents=["a"]),
        _step("d", task="wf.add", parents=["b", "c"],
              kwargs={"a": {"$ref": "steps.b.result", "default": 0}, "b": 2}),
    ]}
    spec["steps"][3]["kwargs"] = {"label": "d", "a": 40, "b": 2}
    run = _run_to_end(workflow_platform, tenant, spec)
    assert run.status == "SUCCEEDED"
    assert _statuses(run) == {"a": "SUCCEEDED", "b": "SUCCEEDED", "c": "SUCCEEDED",
                              "d": "SUCCEEDED"}
    assert run.state["steps"]["d"]["result"] == 42
    log = _step_log(workflow_platform)
    assert Counter(log) == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert log[0] == "a" and log[-1] == "d"
    runs = workflow_platform.redis.hgetall(RUNS_KEY)
    assert set(map(int, runs.values())) == {1}, "a step body ran twice"
    assert Execution.objects.filter(tenant=tenant).count() == 4
    # Every step transition and the run's start and end are audit rows (the batch's one
    # statement writes them with the run's state).
    events = AuditEvent.objects.filter(tenant_id=tenant.tenant_id,
                                       data__run_id=str(run.run_id))
    paths = Counter((e.data["step"], e.data["before"], e.data["after"])
                    for e in events if e.action == audit.WORKFLOW_STEP_CHANGED)
    assert paths == {(key, before, after): 1 for key in "abcd"
                     for before, after in (("PENDING", "READY"), ("READY", "RUNNING"),
                                           ("RUNNING", "SUCCEEDED"))}
    run_actions = Counter(e.action for e in events if e.action != audit.WORKFLOW_STEP_CHANGED)
    assert run_actions == {audit.WORKFLOW_RUN_STARTED: 1, audit.WORKFLOW_RUN_ENDED: 1}


PARENT_MIXES = [("s",), ("f",), ("k",), ("u",), ("s", "f"), ("s", "k"), ("s", "u"), ("f", "k"),
                ("k", "u"), ("s", "f", "k", "u")]


def test_every_trigger_rule_against_each_mix_of_parent_outcomes(workflow_platform, tenant):
    """Parents that succeed (s), fail (f), are skipped by a false condition (k) and are
    upstream_failed (u); for every rule a child over each mix. The real run must end as the
    reference model written from Airflow's rule texts predicts."""
    from tests.unit.workflows.reference_model import ModelStep, predict
    from workflows.rules import TriggerRule

    steps = [_step("s"), _step("f", task="wf.fail"), _step("k", condition="false"),
             _step("u", parents=["f"])]
    model = [ModelStep("s", [], attempts=["SUCCEEDED"]), ModelStep("f", [], attempts=["FAILED"]),
             ModelStep("k", [], condition=False), ModelStep("u", ["f"], attempts=["SUCCEEDED"])]
    for rule in TriggerRule:
        for mix in PARENT_MIXES:
            key = f"{rule.value}-{''.join(mix)}"
            steps.append(_step(key, parents=list(mix), trigger_rule=rule.value))
            model.append(ModelStep(key, list(mix), rule=rule.value, attempts=["SUCCEEDED"]))
    expected, expected_run = predict(model)
    run = _run_to_end(workflow_platform, tenant, {"name": "rules", "steps": steps},
                      timeout_s=120)
    assert _statuses(run) == expected
    assert run.status == expected_run
    ran = Counter(_step_log(workflow_platform))
    assert set(ran.values()) == {1}, "a step body ran twice"
    assert set(ran) == {k for k, v in expected.items() if v in ("SUCCEEDED", "FAILED")}


def test_a_false_condition_skips_its_subtree_and_a_branch_runs_only_its_choice(
        workflow_platform, tenant):
    spec = {"name": "branching", "steps": [
        _step("start"),
        _step("maybe", parents=["start"], condition="input.send"),
        _step("after-maybe", parents=["maybe"]),
        {"key": "route", "kind": "branch", "task": "wf.choose", "parents": ["start"],
         "children": ["left", "right"],
         "kwargs": {"label": "route", "branch": {"$ref": "input.side"}}},
        _step("left", parents=["route"]),
        _step("right", parents=["route"]),
        _step("join", parents=["left", "right"], trigger_rule="none_failed_min_one_success"),
    ]}
    run = _run_to_end(workflow_platform, tenant, spec, {"send": False, "side": "right"})
    assert run.status == "SUCCEEDED"
    assert _statuses(run) == {
        "start": "SUCCEEDED", "maybe": "SKIPPED", "after-maybe": "SKIPPED",
        "route": "SUCCEEDED", "left": "SKIPPED", "right": "SUCCEEDED", "join": "SUCCEEDED"}
    assert Counter(_step_log(workflow_platform)) == {"start": 1, "route": 1, "right": 1,
                                                     "join": 1}


def test_a_step_retried_with_backoff_then_succeeding_and_a_failure_propagating(
        workflow_platform, tenant):
    spec = {"name": "retries", "steps": [
        _step("flaky", task="wf.flaky", kwargs={"failures": 2},
              retry={"max_attempts": 3, "initial_delay_ms": 100, "max_delay_ms": 200}),
        _step("after-flaky", parents=["flaky"]),
        _step("broken", task="wf.fail", retry={"max_attempts": 2, "initial_delay_ms": 50}),
        _step("after-broken", parents=["broken"]),
        _step("after-after", parents=["after-broken"]),
    ]}
    run = _run_to_end(workflow_platform, tenant, spec)
    assert _statuses(run) == {"flaky": "SUCCEEDED", "after-flaky": "SUCCEEDED",
                              "broken": "FAILED", "after-broken": "UPSTREAM_FAILED",
                              "after-after": "UPSTREAM_FAILED"}
    assert run.status == "FAILED"
    assert run.state["steps"]["flaky"]["attempt"] == 3
    assert Counter(_step_log(workflow_platform)) == {"flaky": 3, "after-flaky": 1, "broken": 2}
    assert "fails on purpose" in run.state["steps"]["broken"]["reason"]["text"]


def test_a_fan_out_of_a_thousand_and_the_fan_in_receiving_results_in_order(
        workflow_platform, tenant):
    spec = {"name": "fan", "steps": [
        _step("items", task="wf.items", kwargs={"count": 1000}),
        {"key": "square", "kind": "map", "task": "wf.square", "parents": ["items"],
         "map_over": "steps.items.result",
         "kwargs": {"label": "square", "item": {"$ref": "map.item"}}},
        {"key": "total", "kind": "fan_in", "task": "wf.echo", "parents": ["square"],
         "kwargs": {"label": "total", "value": {"$ref": "steps.square.result"}}},
    ]}
    run = _run_to_end(workflow_platform, tenant, spec, timeout_s=180)
    assert run.status == "SUCCEEDED", run.state["steps"]["total"]
    assert run.state["steps"]["total"]["result"] == [i * i for i in range(1000)]
    assert Counter(_step_log(workflow_platform))["square"] == 1000


def _wait_status(run, status: str, timeout_s: float = 30) -> WorkflowRun:
    assert wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).status == status,
                    timeout_s=timeout_s), WorkflowRun.objects.get(pk=run.pk).state
    return WorkflowRun.objects.get(pk=run.pk)


def _step_status(run, key: str) -> str:
    return WorkflowRun.objects.get(pk=run.pk).state["steps"][key]["status"]


def test_cancel_mid_run_stops_the_running_step_and_the_pending_ones_never_start(
        prefork_workflow_platform, tenant):
    workflow_platform = prefork_workflow_platform
    engine.define(tenant, {"name": "cancel-me", "steps": [
        _step("long", task="wf.sleep", kwargs={"seconds": 30}),
        _step("after", parents=["long"]),
    ]})
    run = engine.start_run("cancel-me", tenant=tenant, queue=workflow_platform.queue)
    assert wait_for(lambda: "long" in _step_log(workflow_platform), timeout_s=30)
    engine.cancel_run(run.run_id, tenant=tenant, by="user:ops")
    run = _wait_status(run, "CANCELLED", timeout_s=30)
    assert _statuses(run) == {"long": "CANCELLED", "after": "CANCELLED"}
    assert _step_log(workflow_platform) == ["long"], "a pending step started"
    execution = Execution.objects.get(tenant=tenant)
    assert execution.status == "CANCELLED"
    assert engine.cancel_run(run.run_id, tenant=tenant).status == "CANCELLED"  # idempotent


def test_a_run_past_its_timeout_ends_timed_out_with_its_running_step_stopped(
        prefork_workflow_platform, tenant):
    workflow_platform = prefork_workflow_platform
    engine.define(tenant, {"name": "slow", "run_timeout_s": 2, "steps": [
        _step("long", task="wf.sleep", kwargs={"seconds": 30}),
        _step("after", parents=["long"]),
    ]})
    run = engine.start_run("slow", tenant=tenant, queue=workflow_platform.queue)
    run = _wait_status(run, "TIMED_OUT", timeout_s=30)
    assert _statuses(run)["after"] in ("CANCELLED", "UPSTREAM_FAILED")
    assert run.reason["code"] == "run_timeout"
    assert _step_log(workflow_platform) == ["long"]


def test_retry_from_failure_reruns_the_failed_steps_and_keeps_what_succeeded(
        workflow_platform, tenant):
    spec = {"name": "repairable", "steps": [
        _step("ok"),
        _step("flaky", task="wf.flaky", kwargs={"failures": 1}),
        _step("join", parents=["ok", "flaky"]),
    ]}
    run = _run_to_end(workflow_platform, tenant, spec)
    assert run.status == "FAILED"
    assert _statuses(run) == {"ok": "SUCCEEDED", "flaky": "FAILED", "join": "UPSTREAM_FAILED"}
    engine.retry_run(run.run_id, tenant=tenant, by="user:ops")
    run = _wait_status(run, "SUCCEEDED")
    assert _statuses(run) == {"ok": "SUCCEEDED", "flaky": "SUCCEEDED", "join": "SUCCEEDED"}
    assert Counter(_step_log(workflow_platform)) == {"ok": 1, "flaky": 2, "join": 1}
    with pytest.raises(engine.RunStateConflict):
        engine.retry_run(run.run_id, tenant=tenant)


def test_a_run_keeps_its_version_while_the_definition_changes(workflow_platform, tenant):
    first = engine.define(tenant, {"name": "versioned", "steps": [
        _step("one", task="wf.sleep", kwargs={"seconds": 1})]})
    run = engine.start_run("versioned", tenant=tenant, queue=workflow_platform.queue)
    second = engine.define(tenant, {"name": "versioned", "steps": [
        _step("one", task="wf.sleep", kwargs={"seconds": 1}), _step("two", parents=["one"])]})
    assert (first.version, second.version) == (1, 2)
    assert engine.define(tenant, {"name": "versioned", "steps": [
        _step("one", task="wf.sleep", kwargs={"seconds": 1}),
        _step("two", parents=["one"])]}).version == 2, "an identical spec is no new version"
    run = _wait_status(run, "SUCCEEDED")
    assert list(run.state["steps"]) == ["one"]
    assert run.definition_id == first.definition_id
    newer = engine.start_run("versioned", tenant=tenant, queue=workflow_platform.queue)
    newer = _wait_status(newer, "SUCCEEDED")
    assert list(newer.state["steps"]) == ["one", "two"]


def test_starting_twice_with_one_idempotency_key_starts_one_run(workflow_platform, tenant):
    engine.define(tenant, {"name": "once", "steps": [_step("only")]})
    first = engine.start_run("once", tenant=tenant, idempotency_key="k-1",
                             queue=workflow_platform.queue)
    again = engine.start_run("once", tenant=tenant, idempotency_key="k-1",
                             queue=workflow_platform.queue)
    assert first.run_id == again.run_id
    _wait_status(first, "SUCCEEDED")
    assert _step_log(workflow_platform) == ["only"]


def test_a_tenant_never_sees_or_starts_another_tenants_workflow(workflow_platform, tenant,
                                                                other_tenant):
    engine.define(tenant, {"name": "private", "steps": [_step("only")]})
    with pytest.raises(engine.WorkflowNotFound):
        engine.start_run("private", tenant=other_tenant, queue=workflow_platform.queue)
    run = engine.start_run("private", tenant=tenant, queue=workflow_platform.queue)
    with pytest.raises(engine.WorkflowNotFound):
        engine.cancel_run(run.run_id, tenant=other_tenant)


def test_a_cron_job_starts_a_workflow_run_once_per_occurrence(workflow_platform, tenant):
    from scheduler import api
    from scheduler.models import Job

    engine.define(tenant, {"name": "scheduled", "steps": [_step("only")]})
    job = api.schedule_once("chrono.start_workflow", tenant=tenant, queue=workflow_platform.queue,
                            kwargs={"workflow": "scheduled", "run_input": {"day": 1},
                                    "queue": workflow_platform.queue}, delay=0.2)
    assert wait_for(lambda: WorkflowRun.objects.filter(name="scheduled").exists(), timeout_s=30)
    run = WorkflowRun.objects.get(name="scheduled")
    assert run.input == {"day": 1}
    assert run.created_by == f"job:{job.job_id}"
    _wait_status(run, "SUCCEEDED")
    execution = Execution.objects.get(job_id=job.job_id)
    assert execution.result == str(run.run_id)
    assert Job.objects.get(pk=job.pk).status == "COMPLETED"
