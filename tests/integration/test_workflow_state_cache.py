"""The engine keeps the parsed state of the runs it wrote (``workflows.engine._parsed_states``):
a pass over a run at the version it wrote itself takes that state instead of parsing the row
again, and only a committed version is ever taken; any other version is read from the row."""

from __future__ import annotations

import pytest
from django.db import transaction

from scheduler.models import ExecutionStatus, Job
from tests.integration.workflow_support import run_step_job
from workflows import engine
from workflows.models import WorkflowRun
from workflows.persistence import state_from_json, state_to_json
from workflows.runs import StepRef
from workflows.states import StepStatus

pytestmark = pytest.mark.django_db(transaction=True)

WIDE = {"name": "wide-cached", "steps": [
    {"key": "each", "kind": "map", "task": "tests.noop", "map_over": "input.items",
     "kwargs": {"item": {"$ref": "map.item"}}},
    {"key": "join", "task": "tests.noop", "parents": ["each"]},
]}


def end_instance(run, index: int, result: object) -> None:
    run_step_job(run, StepRef("each", index), status=ExecutionStatus.SUCCEEDED, result=result)


def kept(run_id) -> tuple[int, object] | None:
    return engine._parsed_states._kept._values.get(run_id)


def test_a_pass_keeps_the_state_it_committed_and_the_next_pass_takes_it(tenant):
    engine.define(tenant, WIDE)
    run = engine.start_run("wide-cached", tenant=tenant, run_input={"items": [1, 2, 3]})
    end_instance(run, 0, {"n": 1})
    assert engine.apply_pending_ends() == 1
    row = WorkflowRun.objects.get(run_id=run.run_id)
    version, state = kept(run.run_id)
    # What is kept is what the row holds, at the row's version.
    assert version == row.state_version
    assert state_to_json(state) == row.state
    assert state == state_from_json(row.state)

    # The next pass parses nothing: the row's state is not read into a state.
    parsed = []
    real = engine.state_from_json
    engine.state_from_json = lambda data: parsed.append(1) or real(data)
    try:
        end_instance(run, 1, {"n": 2})
        assert engine.apply_pending_ends() == 1
    finally:
        engine.state_from_json = real
    assert parsed == []
    row = WorkflowRun.objects.get(run_id=run.run_id)
    assert kept(run.run_id)[0] == row.state_version
    each = state_from_json(row.state).steps["each"]
    assert [i.status for i in each.instances] == [StepStatus.SUCCEEDED, StepStatus.SUCCEEDED,
                                                  StepStatus.READY]
    assert [i.result for i in each.instances[:2]] == [{"n": 1}, {"n": 2}]

    end_instance(run, 2, {"n": 3})
    assert engine.apply_pending_ends() == 1
    row = WorkflowRun.objects.get(run_id=run.run_id)
    join = engine.task_job_id(run.run_id, StepRef("join"), 1)
    assert Job.objects.filter(job_id=join).exists()  # the fan-in was dispatched once
    assert state_to_json(kept(run.run_id)[1]) == row.state


def test_a_rolled_back_pass_keeps_nothing_and_another_writers_version_is_read_from_the_row(
    tenant
):
    engine.define(tenant, WIDE)
    run = engine.start_run("wide-cached", tenant=tenant, run_input={"items": [1, 2]})
    end_instance(run, 0, {"n": 1})
    assert engine.apply_pending_ends() == 1
    before = kept(run.run_id)

    # A pass whose transaction rolls back: its version is not kept (another writer may write
    # that version differently), and its end waits to be applied again.
    end_instance(run, 1, {"n": 2})

    class Abort(Exception):
        pass

    real = engine._carry_out_many

    def failing(*args, **kwargs):
        real(*args, **kwargs)
        raise Abort

    engine._carry_out_many = failing
    try:
        with pytest.raises(Abort):
            engine.apply_pending_ends()
    finally:
        engine._carry_out_many = real
    assert kept(run.run_id) == before
    assert WorkflowRun.objects.get(run_id=run.run_id).state_version == before[0]

    # Another writer (another engine process) moves the row on: its version is not the kept
    # one, so the row is read, and what it says is what the pass decides on.
    with transaction.atomic():
        row = WorkflowRun.objects.select_for_update().get(run_id=run.run_id)
        state = state_from_json(row.state)
        foreign = state.with_steps(state.steps)
        row.state = state_to_json(foreign)
        row.state["input"] = {"items": [1, 2], "seen_by": "another engine"}
        row.state_version += 1
        row.save(update_fields=["state", "state_version"])
    assert engine.apply_pending_ends() == 1
    row = WorkflowRun.objects.get(run_id=run.run_id)
    assert row.state["input"]["seen_by"] == "another engine"
    assert kept(run.run_id)[0] == row.state_version
    assert row.status == "RUNNING"  # the join is dispatched, not yet run
    join = engine.task_job_id(run.run_id, StepRef("join"), 1)
    assert Job.objects.filter(job_id=join).exists()


def test_a_runs_state_is_written_with_lz4_compression(tenant):
    """Every pass rewrites the state whole: PostgreSQL compresses it with lz4 (migration
    workflows 0005), a little over half of pglz's CPU for a 10,000-instance map's state."""
    from django.db import connection

    engine.define(tenant, WIDE)
    run = engine.start_run("wide-cached", tenant=tenant,
                           run_input={"items": list(range(3_000))})
    with connection.cursor() as cursor:
        cursor.execute("SELECT attcompression FROM pg_attribute WHERE attrelid = "
                       "'chrono_workflow_run'::regclass AND attname = 'state'")
        assert cursor.fetchone() == ("l",)
        cursor.execute("SELECT pg_column_compression(state) FROM chrono_workflow_run "
                       "WHERE run_id = %s", [run.run_id])
        assert cursor.fetchone() == ("lz4",)
