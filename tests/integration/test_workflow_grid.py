"""A workflow definition's page shows its last runs × steps as a grid: a column per run, oldest
first, linking to the run; a cell per step coloured by its state in that run, with the
duration of its execution; two queries however many runs and steps."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import ExecutionStatus
from tests.integration.workflow_support import run_step_job
from workflows import engine
from workflows.grid import run_grid
from workflows.runs import StepRef

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {"name": "nightly", "steps": [
    {"key": "extract", "task": "tests.noop"},
    {"key": "load", "task": "tests.noop", "parents": ["extract"]},
]}


def run_step(run, key: str, *, status: ExecutionStatus | None, took_ms: int = 120) -> None:
    """Fire, start and (with ``status``) finish the first attempt of ``key`` as the beat and a
    worker would, then let the engine apply the end."""
    run_step_job(run, StepRef(key), status=status, took_ms=took_ms)
    if status is not None:
        engine.apply_pending_ends()


@pytest.fixture
def three_runs(tenant, redis_client):
    version = engine.define(tenant, SPEC)
    done = engine.start_run("nightly", tenant=tenant)
    run_step(done, "extract", status=ExecutionStatus.SUCCEEDED, took_ms=120)
    run_step(done, "load", status=ExecutionStatus.SUCCEEDED, took_ms=80)
    failed = engine.start_run("nightly", tenant=tenant)
    run_step(failed, "extract", status=ExecutionStatus.FAILED, took_ms=30)
    running = engine.start_run("nightly", tenant=tenant)
    run_step(running, "extract", status=None)
    return version, [done, failed, running]


def test_the_grid_holds_each_runs_step_states_and_durations_oldest_first(three_runs):
    version, runs = three_runs
    with CaptureQueriesContext(connection) as queries:
        grid = run_grid(version)
    assert len(queries) == 2  # the runs, the executions of their steps
    assert [r["run_id"] for r in grid["runs"]] == [str(r.run_id) for r in runs]
    assert [r["status"] for r in grid["runs"]] == ["SUCCEEDED", "FAILED", "RUNNING"]
    cells = {row["step"]: row["cells"] for row in grid["rows"]}
    assert list(cells) == ["extract", "load"]
    assert [c["status"] for c in cells["extract"]] == ["SUCCEEDED", "FAILED", "RUNNING"]
    assert [c["status"] for c in cells["load"]] == ["SUCCEEDED", "UPSTREAM_FAILED", "PENDING"]
    assert [c["duration_ms"] for c in cells["extract"]] == [120, 30, None]
    assert cells["load"][0]["duration_ms"] == 80


def test_the_definition_page_draws_the_grid_with_links_to_each_run(three_runs, admin_client):
    version, runs = three_runs
    page = admin_client.get(
        f"/admin/workflows/workflowdefinitionversion/{version.definition_id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="run-grid"' in html
    for run in runs:
        assert f'href="/admin/workflows/workflowrun/{run.run_id}/change/"' in html
    assert html.count('class="run-grid-cell st-SUCCEEDED"') == 2
    assert 'class="run-grid-cell st-UPSTREAM_FAILED"' in html and ">120 ms<" in html
    two = admin_client.get(
        f"/admin/workflows/workflowdefinitionversion/{version.definition_id}/change/?runs=2")
    assert two.content.decode().count('class="run-grid-run ') == 2
    assert str(runs[0].run_id) not in two.content.decode()  # the last two only


@pytest.mark.parametrize("runs", ["0", "101", "many", "-3"])
def test_a_bad_runs_parameter_is_a_400_that_says_what_to_send(three_runs, admin_client, runs):
    version, _ = three_runs
    answer = admin_client.get(
        f"/admin/workflows/workflowdefinitionversion/{version.definition_id}/change/",
        {"runs": runs})
    assert answer.status_code == 400
    assert "runs must be a whole number from 1 to 100" in answer.content.decode()


def test_a_version_without_runs_says_so(tenant, admin_client, redis_client):
    version = engine.define(tenant, SPEC)
    page = admin_client.get(
        f"/admin/workflows/workflowdefinitionversion/{version.definition_id}/change/")
    assert 'id="run-grid-empty"' in page.content.decode()
