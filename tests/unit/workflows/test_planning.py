"""Retry from failure and cancellation plans (USERS.md rows 18 and 19)."""

from __future__ import annotations

import pytest

from tests.unit.workflows.driver import Run, workflow
from workflows.errors import InvalidEvent
from workflows.planning import plan_cancellation, plan_retry_from_failure
from workflows.runs import RetryDue, RetryFromFailure, StepEnded, StepRef
from workflows.states import RunStatus, StepStatus

ETL = workflow(
    {"key": "extract"},
    {"key": "transform", "parents": ["extract"], "args": [{"$ref": "steps.extract.result"}]},
    {"key": "load", "parents": ["transform"]},
    {"key": "alert", "parents": ["transform"], "trigger_rule": "one_failed"},
    {"key": "audit", "parents": ["extract"]},
    {"key": "report", "parents": ["transform", "audit"], "trigger_rule": "all_done"},
    run_timeout_s=600,
)


def failed_etl() -> Run:
    run = Run(ETL, now_ms=0)
    run.start()
    run.succeed("extract", {"rows": 3})
    run.succeed("audit", "audited")
    run.fail("transform")
    run.succeed("alert")
    run.succeed("report")
    assert run.statuses() == {"extract": "SUCCEEDED", "transform": "FAILED",
                              "load": "UPSTREAM_FAILED", "alert": "SUCCEEDED",
                              "audit": "SUCCEEDED", "report": "SUCCEEDED"}
    assert run.state.status is RunStatus.FAILED
    return run


def test_the_plan_resets_the_failures_and_everything_below_them_and_keeps_the_rest():
    plan = plan_retry_from_failure(ETL, failed_etl().state)
    assert plan.reset == ("transform", "load", "alert", "report")
    assert plan.kept == ("extract", "audit")
    assert plan.rerun_instances == {}


def test_retry_from_failure_reruns_the_failed_step_with_the_kept_results():
    run = failed_etl()
    evaluation = run.send(RetryFromFailure(), now_ms=5_000)
    assert [str(d.ref) for d in evaluation.dispatches] == ["transform"]
    assert evaluation.dispatches[0].args == [{"rows": 3}]
    assert run.step("extract").result == {"rows": 3}
    assert run.state.status is RunStatus.RUNNING
    assert run.state.deadline_ms == 605_000


def test_retry_from_failure_re_evaluates_every_downstream_state():
    run = failed_etl()
    run.send(RetryFromFailure())
    assert run.statuses()["load"] == "PENDING"  # not left UPSTREAM_FAILED (airflow#52640)
    run.succeed("transform")
    assert run.statuses() == {"extract": "SUCCEEDED", "transform": "SUCCEEDED",
                              "load": "READY", "alert": "SKIPPED", "audit": "SUCCEEDED",
                              "report": "READY"}
    run.succeed("load")
    run.succeed("report")
    assert run.state.status is RunStatus.SUCCEEDED
    assert run.dispatched().count("extract") == 1  # nothing above the failure ran again


def test_a_retried_step_gets_a_fresh_retry_budget_and_new_attempt_numbers():
    definition = workflow({"key": "a", "retry": {"max_attempts": 2}})
    run = Run(definition)
    run.start()
    run.fail("a")
    run.send(RetryDue("a", 2))
    run.fail("a")
    assert run.state.status is RunStatus.FAILED
    evaluation = run.send(RetryFromFailure())
    assert evaluation.dispatches[0].attempt == 3
    evaluation = run.fail("a")
    assert [r.attempt for r in evaluation.retries] == [4]  # two more attempts, not zero
    with pytest.raises(InvalidEvent):  # the old attempt's late result is fenced out
        run.send(StepEnded("a", 2, StepStatus.SUCCEEDED))


def test_a_map_reruns_only_the_instances_that_did_not_succeed():
    definition = workflow(
        {"key": "each", "kind": "map", "map_over": "input.rows",
         "args": [{"$ref": "map.item"}]},
        {"key": "total", "kind": "fan_in", "parents": ["each"]})
    run = Run(definition, {"rows": ["a", "b", "c"]})
    run.start()
    run.succeed("each", "A", index=0)
    run.fail("each", index=1)
    run.succeed("each", "C", index=2)
    assert run.state.status is RunStatus.FAILED
    assert plan_retry_from_failure(definition, run.state).rerun_instances == {"each": (1,)}
    evaluation = run.send(RetryFromFailure())
    assert [(str(d.ref), d.args, d.attempt) for d in evaluation.dispatches] == [
        ("each[1]", ["b"], 2)]
    run.succeed("each", "B", index=1)
    assert run.dispatch_of("total").args == [["A", "B", "C"]]


def test_a_map_below_a_reset_step_expands_again_with_attempts_above_the_old_ones():
    definition = workflow(
        {"key": "extract"},
        {"key": "each", "kind": "map", "parents": ["extract"], "map_over": "input.rows",
         "trigger_rule": "all_done"},
        {"key": "after", "parents": ["extract"]})
    run = Run(definition, {"rows": [1, 2]})
    run.start()
    run.fail("extract")
    run.succeed("each", index=0)
    run.succeed("each", index=1)
    assert run.state.status is RunStatus.FAILED  # leaf 'after' is UPSTREAM_FAILED
    run.send(RetryFromFailure())
    assert run.status("each") == "PENDING"
    run.succeed("extract")
    assert [run.step("each", i).attempt for i in range(2)] == [2, 2]
    with pytest.raises(InvalidEvent):  # a late result of the first expansion is fenced out
        run.send(StepEnded("each", 1, StepStatus.SUCCEEDED, map_index=0))


def test_only_a_failed_or_timed_out_run_can_be_retried():
    run = Run(workflow({"key": "a"}))
    run.start()
    with pytest.raises(InvalidEvent, match="only a FAILED or TIMED_OUT run"):
        run.send(RetryFromFailure())
    run.succeed("a")
    with pytest.raises(InvalidEvent):
        plan_retry_from_failure(run.definition, run.state)


def test_a_timed_out_run_retries_its_cancelled_steps():
    from workflows.runs import DeadlineCheck

    definition = workflow({"key": "a"}, {"key": "b", "parents": ["a"]}, run_timeout_s=1)
    run = Run(definition)
    run.start()
    run.succeed("a")
    run.begin("b")
    run.send(DeadlineCheck(), now_ms=1_000)
    run.end("b", StepStatus.CANCELLED)
    assert run.state.status is RunStatus.TIMED_OUT
    evaluation = run.send(RetryFromFailure(), now_ms=2_000)
    assert [str(d.ref) for d in evaluation.dispatches] == ["b"]
    assert run.state.deadline_ms == 3_000


def test_the_cancellation_plan_cancels_what_has_not_started_and_stops_what_runs():
    definition = workflow(
        {"key": "a"}, {"key": "b"}, {"key": "c", "parents": ["a"]},
        {"key": "child", "kind": "sub_workflow", "sub_workflow": "other"})
    run = Run(definition)
    run.start()
    run.begin("a")
    run.begin("child")
    plan = plan_cancellation(definition, run.state)
    assert plan.cancel == (StepRef("b"), StepRef("c"))
    assert [(s.ref, s.action) for s in plan.stop] == [(StepRef("a"), "cancel"),
                                                       (StepRef("child"), "terminate")]
