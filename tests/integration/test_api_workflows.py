"""The workflow endpoints: definitions with versions, bad ones refused with the field path,
runs started and read with every step, cancel and retry, and nothing across tenants. (That
the runs really run is the e2e tests' part: here no beat or worker runs.)"""

from __future__ import annotations

import pytest

from workflows import engine
from workflows.models import WorkflowRun
from workflows.runs import StepRef
from workflows.subworkflows import child_idempotency_key

pytestmark = pytest.mark.django_db(transaction=True)

DIAMOND = {"name": "diamond", "steps": [
    {"key": "a", "task": "wf.echo"},
    {"key": "b", "task": "wf.echo", "parents": ["a"]},
    {"key": "c", "task": "wf.echo", "parents": ["a"]},
    {"key": "d", "task": "wf.echo", "parents": ["b", "c"]},
]}


def test_a_definition_gets_versions_and_an_identical_one_makes_none(tenant_api):
    first = tenant_api.post_json("/api/v1/workflows/", DIAMOND)
    assert first.status_code == 201 and first.json()["version"] == 1
    again = tenant_api.post_json("/api/v1/workflows/", DIAMOND)
    assert again.status_code == 200 and again.json()["version"] == 1
    edited = {**DIAMOND, "run_timeout_s": 60}
    second = tenant_api.post_json("/api/v1/workflows/", edited)
    assert second.status_code == 201 and second.json()["version"] == 2
    detail = tenant_api.get("/api/v1/workflows/diamond/").json()
    assert detail["version"] == 2 and [v["version"] for v in detail["versions"]] == [2, 1]
    old = tenant_api.get("/api/v1/workflows/diamond/versions/1/").json()
    assert old["spec"]["run_timeout_s"] is None
    assert [w["name"] for w in tenant_api.get("/api/v1/workflows/").json()["results"]] == [
        "diamond"]


@pytest.mark.parametrize("spec, path", [
    ({"name": "x", "steps": [{"key": "a", "task": "t", "parents": ["b"]},
                             {"key": "b", "task": "t", "parents": ["a"]}]}, "steps"),
    ({"name": "x", "steps": [{"key": "a", "task": "t", "parents": ["nope"]}]},
     "steps.a.parents[0]"),
    ({"name": "x", "steps": [{"key": "a", "task": "t", "trigger_rule": "all_sucess"}]},
     "steps.a.trigger_rule"),
    ({"name": "x", "steps": [{"key": "a", "task": "t", "condition": "input.x >"}]},
     "steps.a.condition"),
    ({"name": "x", "steps": [{"key": "j", "kind": "fan_in", "task": "t"}]}, "steps.j"),
    ({"name": "x", "steps": [{"key": "a", "task": "t",
                              "kwargs": {"v": {"$ref": "steps.b.result"}}},
                             {"key": "b", "task": "t"}]}, "steps.a.kwargs"),
    ({"name": "x", "steps": [{"key": "m", "kind": "map", "task": "t", "map_over": 5}]},
     "steps.m.map_over"),
])
def test_a_bad_definition_is_a_400_naming_the_field_path(tenant_api, spec, path):
    answer = tenant_api.post_json("/api/v1/workflows/", spec)
    assert answer.status_code == 400, answer.json()
    paths = [e["path"] for e in answer.json()["errors"]]
    assert any(p.startswith(path) for p in paths), paths
    assert all(e["message"] for e in answer.json()["errors"])
    assert tenant_api.get("/api/v1/workflows/").json()["results"] == []


def test_a_run_is_started_read_with_its_steps_and_waiting_reasons_then_cancelled(tenant_api):
    tenant_api.post_json("/api/v1/workflows/", DIAMOND)
    started = tenant_api.post_json("/api/v1/workflows/diamond/runs/", {"input": {"day": 1}},
                                   **{"Idempotency-Key": "run-1"})
    assert started.status_code == 201, started.json()
    run = started.json()
    assert run["status"] == "RUNNING" and run["version"] == 1
    steps = {s["key"]: s for s in run["steps"]}
    assert steps["a"]["status"] == "READY"
    assert steps["d"]["status"] == "PENDING"
    assert "waiting for" in steps["d"]["waiting"]["text"]
    again = tenant_api.post_json("/api/v1/workflows/diamond/runs/", {"input": {"day": 1}},
                                 **{"Idempotency-Key": "run-1"})
    assert again.json()["run_id"] == run["run_id"]
    assert WorkflowRun.objects.count() == 1
    listing = tenant_api.get("/api/v1/workflow-runs/?workflow=diamond&status=RUNNING").json()
    assert [r["run_id"] for r in listing["results"]] == [run["run_id"]]
    cancelled = tenant_api.post_json(f"/api/v1/workflow-runs/{run['run_id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    retry = tenant_api.post_json(f"/api/v1/workflow-runs/{run['run_id']}/retry/")
    assert retry.status_code == 409


def test_another_tenant_sees_and_starts_nothing_of_it(tenant_api, other_api):
    tenant_api.post_json("/api/v1/workflows/", DIAMOND)
    run = tenant_api.post_json("/api/v1/workflows/diamond/runs/", {}).json()
    assert other_api.get("/api/v1/workflows/").json()["results"] == []
    assert other_api.get("/api/v1/workflows/diamond/").status_code == 404
    assert other_api.post_json("/api/v1/workflows/diamond/runs/", {}).status_code == 404
    assert other_api.get(f"/api/v1/workflow-runs/{run['run_id']}/").status_code == 404
    assert other_api.post_json(f"/api/v1/workflow-runs/{run['run_id']}/cancel/"
                               ).status_code == 404
    assert other_api.get("/api/v1/workflow-runs/").json()["results"] == []


def test_bad_run_filters_and_ids_are_400_and_404(tenant_api):
    assert tenant_api.get("/api/v1/workflow-runs/?colour=red").status_code == 400
    assert tenant_api.get("/api/v1/workflow-runs/?status=SLEEPING").status_code == 400
    assert tenant_api.get("/api/v1/workflow-runs/not-a-uuid/").status_code == 404
    assert tenant_api.post_json("/api/v1/workflows/nope/runs/", {}).status_code == 404


def test_a_sub_workflow_step_names_its_child_run_and_cancelling_terminates_it(tenant_api):
    tenant_api.post_json("/api/v1/workflows/", {"name": "child", "steps": [
        {"key": "only", "task": "wf.echo", "kwargs": {"label": {"$ref": "input.label"}}}]})
    assert tenant_api.post_json("/api/v1/workflows/", {"name": "parent", "steps": [
        {"key": "sub", "kind": "sub_workflow", "sub_workflow": "child",
         "kwargs": {"label": {"$ref": "input.label"}}}]}).status_code == 201
    run = tenant_api.post_json("/api/v1/workflows/parent/runs/", {"input": {"label": "x"}}).json()
    [sub] = run["steps"]
    child = WorkflowRun.objects.get(parent_run_id=run["run_id"])
    assert (sub["status"], sub["child_run_id"]) == ("RUNNING", str(child.run_id))
    assert (child.name, child.input, child.parent_step) == ("child", {"label": "x"}, "sub#1")
    again = engine.start_run("child", tenant=child.tenant_id, idempotency_key=(
        child_idempotency_key(run["run_id"], StepRef("sub"), 1)))
    assert again.run_id == child.run_id and WorkflowRun.objects.count() == 2  # one child
    cancelled = tenant_api.post_json(f"/api/v1/workflow-runs/{run['run_id']}/cancel/").json()
    assert cancelled["status"] == "CANCELLED"  # terminate: the parent does not wait
    assert [s["status"] for s in cancelled["steps"]] == ["CANCELLED"]
    child.refresh_from_db()
    assert child.status == "CANCELLED"  # its step had not started: cancelled at once


def test_a_sub_workflow_step_with_a_retry_policy_is_a_400(tenant_api):
    answer = tenant_api.post_json("/api/v1/workflows/", {"name": "x", "steps": [
        {"key": "sub", "kind": "sub_workflow", "sub_workflow": "y",
         "retry": {"max_attempts": 2}}]})
    assert answer.status_code == 400
    assert [e["path"] for e in answer.json()["errors"]] == ["steps.sub.retry"]
