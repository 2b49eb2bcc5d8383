"""The pure part of sub-workflow steps: child naming, cycles, and what a child's end means."""

from __future__ import annotations

import uuid

import pytest

from tests.unit.workflows.driver import Run, workflow
from workflows.engine import error_type_of, parse_definition
from workflows.errors import DefinitionError
from workflows.runs import RunState, StepRef
from workflows.states import RunStatus, StepStatus
from workflows.subworkflows import (
    CHILD_FAILED,
    child_idempotency_key,
    child_outcome,
    cycle_of,
    leaf_results,
    parent_step_label,
    parse_parent_step,
)

RUN_ID = uuid.UUID("00000000-0000-0000-0000-00000000000a")


@pytest.mark.parametrize("ref, attempt, label", [
    (StepRef("billing"), 1, "billing#1"),
    (StepRef("load", 7), 3, "load[7]#3"),
    (StepRef("a-b_c"), 12, "a-b_c#12"),
])
def test_a_parent_step_label_names_the_step_and_attempt_and_reads_back(ref, attempt, label):
    assert parent_step_label(ref, attempt) == label
    assert parse_parent_step(label) == (ref, attempt)


@pytest.mark.parametrize("label", ["", "billing", "billing#", "bil ling#1", "load[x]#1"])
def test_a_label_that_names_no_step_is_refused(label):
    with pytest.raises(ValueError):
        parse_parent_step(label)


def test_the_child_key_is_the_same_for_one_attempt_and_differs_between_attempts():
    first = child_idempotency_key(RUN_ID, StepRef("billing"), 1)
    assert first == child_idempotency_key(str(RUN_ID), StepRef("billing"), 1)
    assert first != child_idempotency_key(RUN_ID, StepRef("billing"), 2)
    assert first != child_idempotency_key(uuid.uuid4(), StepRef("billing"), 1)
    assert len(child_idempotency_key(RUN_ID, StepRef("k" * 100, 9_999), 10_000)) <= 200


def test_a_workflow_already_in_the_chain_of_parents_closes_a_cycle_named_root_first():
    # the run starting the child is "b", its parent "a" (the root)
    assert cycle_of(["b", "a"], "a") == ("a", "b", "a")
    assert cycle_of(["b", "a"], "b") == ("b", "b")
    assert cycle_of(["c", "b", "a"], "b") == ("b", "c", "b")


def test_a_workflow_not_in_the_chain_makes_no_cycle():
    assert cycle_of(["b", "a"], "c") is None
    assert cycle_of([], "a") is None


DIAMOND = workflow({"key": "a"}, {"key": "b", "parents": ["a"]},
                   {"key": "c", "parents": ["a"], "condition": "false"},
                   {"key": "d", "parents": ["a"]}, name="child")


def _ended_diamond() -> RunState:
    run = Run(DIAMOND, now_ms=0)
    run.start()
    run.succeed("a", 1)
    run.succeed("b", {"rows": 2})
    run.succeed("d", "done")
    return run.state


def test_a_succeeded_child_gives_its_succeeded_leaves_results():
    state = _ended_diamond()
    assert state.steps["c"].status is StepStatus.SKIPPED
    assert leaf_results(DIAMOND, state) == {"b": {"rows": 2}, "d": "done"}
    outcome = child_outcome(DIAMOND, state, run_id=RUN_ID, status=RunStatus.SUCCEEDED)
    assert outcome.status == "SUCCEEDED"
    assert outcome.result == {"run_id": str(RUN_ID), "status": "SUCCEEDED",
                              "results": {"b": {"rows": 2}, "d": "done"}}


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT"])
def test_a_failed_or_timed_out_child_fails_the_step_with_its_reason(status):
    outcome = child_outcome(DIAMOND, _ended_diamond(), run_id=RUN_ID, status=status,
                            reason_text="step `b` failed")
    assert outcome.status == "FAILED" and outcome.result is None
    assert outcome.error == (f"{CHILD_FAILED}\nthe sub-workflow run {RUN_ID} of child ended "
                             f"{status}: step `b` failed")
    assert error_type_of(outcome.error) == CHILD_FAILED


def test_a_cancelled_child_cancels_the_step():
    assert child_outcome(DIAMOND, _ended_diamond(), run_id=RUN_ID,
                         status="CANCELLED").status == "CANCELLED"


def _sub(**fields):
    return {"name": "parent", "steps": [
        {"key": "child", "kind": "sub_workflow", "sub_workflow": "other", **fields}]}


def test_the_engine_accepts_a_sub_workflow_step():
    definition = parse_definition(_sub(kwargs={"day": {"$ref": "input.day"}}))
    assert definition.step("child").sub_workflow == "other"


@pytest.mark.parametrize("fields, path", [
    ({"retry": {"max_attempts": 3}}, "steps.child.retry"),
    ({"timeout_s": 5}, "steps.child.timeout_s"),
])
def test_a_sub_workflow_step_with_a_retry_or_step_timeout_is_refused(fields, path):
    with pytest.raises(DefinitionError) as caught:
        parse_definition(_sub(**fields))
    assert caught.value.paths() == [path]
