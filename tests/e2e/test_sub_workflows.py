"""Sub-workflow steps with real processes: a parent run's step starts a child run, the child's
end comes back to the step (through the execution-end rows and the engine's listener), and a
parent that stops applies the step's parent-close policy to its child."""

from __future__ import annotations

import pytest

from tests.e2e.test_workflows import _statuses, _step, _step_log, _wait_status
from tests.helpers import wait_for
from workflows import engine
from workflows.inspection import run_steps
from workflows.models import WorkflowRun

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _sub(key, workflow, parents=(), **fields):
    return {"key": key, "kind": "sub_workflow", "sub_workflow": workflow,
            "parents": list(parents), **fields}


def _start(platform, tenant, name, run_input=None) -> WorkflowRun:
    return engine.start_run(name, tenant=tenant, run_input=run_input, queue=platform.queue)


def _ended(run, timeout_s: float = 60) -> WorkflowRun:
    assert wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).finished_at is not None,
                    timeout_s=timeout_s), WorkflowRun.objects.get(pk=run.pk).state
    return WorkflowRun.objects.get(pk=run.pk)


def _children(run) -> list[WorkflowRun]:
    return list(WorkflowRun.objects.filter(parent_run_id=run.run_id))


def test_a_child_that_succeeds_gives_its_results_to_the_parent_which_carries_on(
        workflow_platform, tenant):
    engine.define(tenant, {"name": "double", "steps": [
        _step("twice", task="wf.add", kwargs={"a": {"$ref": "input.n"},
                                              "b": {"$ref": "input.n"}})]})
    engine.define(tenant, {"name": "parent", "steps": [
        _step("before", kwargs={"value": 21}),
        _sub("sub", "double", parents=["before"], kwargs={"n": {"$ref": "steps.before.result"}}),
        _step("after", parents=["sub"],
              kwargs={"value": {"$ref": "steps.sub.result.results.twice"}}),
    ]})
    run = _ended(_start(workflow_platform, tenant, "parent"))
    assert run.status == "SUCCEEDED", run.state
    assert _statuses(run) == {"before": "SUCCEEDED", "sub": "SUCCEEDED", "after": "SUCCEEDED"}
    [child] = _children(run)
    assert (child.name, child.status, child.input) == ("double", "SUCCEEDED", {"n": 21})
    assert child.parent_step == "sub#1" and child.tenant_id == tenant.tenant_id
    assert run.state["steps"]["sub"]["result"] == {
        "run_id": str(child.run_id), "status": "SUCCEEDED", "results": {"twice": 42}}
    assert run.state["steps"]["after"]["result"] == 42
    assert _step_log(workflow_platform) == ["before", "twice", "after"]
    rows = {row["key"]: row for row in run_steps(run)}
    assert rows["sub"]["child_run_id"] == str(child.run_id)
    assert rows["before"]["child_run_id"] is None


def test_a_child_that_fails_fails_the_step_and_its_successors_are_upstream_failed(
        workflow_platform, tenant):
    engine.define(tenant, {"name": "broken", "steps": [_step("boom", task="wf.fail")]})
    engine.define(tenant, {"name": "parent-of-broken", "steps": [
        _sub("sub", "broken"), _step("after", parents=["sub"])]})
    run = _ended(_start(workflow_platform, tenant, "parent-of-broken"))
    [child] = _children(run)
    assert child.status == "FAILED"
    assert run.status == "FAILED"
    assert _statuses(run) == {"sub": "FAILED", "after": "UPSTREAM_FAILED"}
    reason = run.state["steps"]["sub"]["reason"]
    assert reason["details"]["error_type"] == "workflows.errors.SubWorkflowFailed"
    assert str(child.run_id) in reason["text"] and "`boom` FAILED" in reason["text"]
    assert "after" not in _step_log(workflow_platform)


def test_an_unknown_sub_workflow_fails_the_step_with_the_name_in_its_reason(
        workflow_platform, tenant):
    engine.define(tenant, {"name": "orphan", "steps": [
        _sub("sub", "never-defined"), _step("after", parents=["sub"])]})
    run = _ended(_start(workflow_platform, tenant, "orphan"))
    assert run.status == "FAILED"
    assert _statuses(run) == {"sub": "FAILED", "after": "UPSTREAM_FAILED"}
    reason = run.state["steps"]["sub"]["reason"]
    assert reason["details"]["error_type"] == "workflows.errors.SubWorkflowNotFound"
    assert "no workflow 'never-defined' for this tenant" in reason["text"]
    assert _children(run) == []


def test_a_cycle_of_sub_workflows_is_refused_where_it_would_close(workflow_platform, tenant):
    engine.define(tenant, {"name": "ping", "steps": [_sub("to-pong", "pong")]})
    engine.define(tenant, {"name": "pong", "steps": [_sub("to-ping", "ping")]})
    run = _ended(_start(workflow_platform, tenant, "ping"))
    [child] = _children(run)
    assert child.name == "pong" and child.status == "FAILED"
    assert _children(child) == [], "the cycle started another run"
    reason = child.state["steps"]["to-ping"]["reason"]
    assert reason["details"]["error_type"] == "workflows.errors.SubWorkflowCycle"
    assert "ping → pong → ping" in reason["text"]
    assert run.status == "FAILED" and _statuses(run) == {"to-pong": "FAILED"}


def _cancel_while_the_child_runs(platform, tenant, policy: str):
    engine.define(tenant, {"name": "slow-child", "steps": [
        _step("long", task="wf.sleep", kwargs={"seconds": 30})]})
    engine.define(tenant, {"name": f"parent-{policy}", "steps": [
        _sub("sub", "slow-child", parent_close_policy=policy)]})
    run = _start(platform, tenant, f"parent-{policy}")
    assert wait_for(lambda: "long" in _step_log(platform), timeout_s=30)
    [child] = _children(run)
    engine.cancel_run(run.run_id, tenant=tenant, by="user:ops")
    return run, child


def test_cancelling_the_parent_terminates_the_child_and_ends_the_step_at_once(
        prefork_workflow_platform, tenant):
    run, child = _cancel_while_the_child_runs(prefork_workflow_platform, tenant, "terminate")
    # the step ended in the cancelling transaction: the parent did not wait for the child
    assert WorkflowRun.objects.get(pk=run.pk).state["steps"]["sub"]["status"] == "CANCELLED"
    run = _wait_status(run, "CANCELLED")
    child = _wait_status(child, "CANCELLED")
    assert child.state["steps"]["long"]["status"] == "CANCELLED"


def test_cancelling_the_parent_requests_the_childs_cancel_and_waits_for_its_end(
        prefork_workflow_platform, tenant):
    run, child = _cancel_while_the_child_runs(prefork_workflow_platform, tenant,
                                              "request_cancel")
    assert WorkflowRun.objects.get(pk=child.pk).status in ("CANCELLING", "CANCELLED")
    run = _wait_status(run, "CANCELLED")
    child = WorkflowRun.objects.get(pk=child.pk)
    assert child.status == "CANCELLED"
    assert child.finished_at <= run.finished_at, "the parent did not wait for its child"
    assert run.state["steps"]["sub"]["status"] == "CANCELLED"


def test_cancelling_the_parent_abandons_the_child_which_runs_on(
        prefork_workflow_platform, tenant):
    run, child = _cancel_while_the_child_runs(prefork_workflow_platform, tenant, "abandon")
    run = _wait_status(run, "CANCELLED")
    assert run.state["steps"]["sub"]["reason"]["code"] == "abandoned"
    child = WorkflowRun.objects.get(pk=child.pk)
    assert child.status == "RUNNING" and child.state["steps"]["long"]["status"] != "CANCELLED"
    engine.cancel_run(child.run_id, tenant=tenant)  # its end is then refused by the parent
    _wait_status(child, "CANCELLED")
    assert WorkflowRun.objects.get(pk=run.pk).status == "CANCELLED"
