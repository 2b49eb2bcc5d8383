"""The DAG evaluator: what each event leads to, read as the run's story."""

from __future__ import annotations

import random

import pytest

from tests.unit.workflows.driver import Run, workflow
from workflows.errors import InvalidEvent
from workflows.evaluation import evaluate, waiting_reasons
from workflows.runs import (
    CancelRequested,
    DeadlineCheck,
    EvaluationChain,
    RetryDue,
    RetryFromFailure,
    RunStarted,
    StepEnded,
    StepStarted,
    StepState,
    admission,
)
from workflows.states import RunStatus, StepStatus

DIAMOND = workflow(
    {"key": "extract", "kwargs": {"day": {"$ref": "input.day"}}},
    {"key": "left", "parents": ["extract"], "args": [{"$ref": "steps.extract.result.n"}]},
    {"key": "right", "parents": ["extract"]},
    {"key": "join", "parents": ["left", "right"]},
)


# -- starting and advancing -------------------------------------------------------------


def test_a_run_starts_by_dispatching_its_roots_with_resolved_arguments():
    run = Run(DIAMOND, {"day": "2024-03-01"})
    evaluation = run.start()
    assert [str(d.ref) for d in evaluation.dispatches] == ["extract"]
    assert evaluation.dispatches[0].kwargs == {"day": "2024-03-01"}
    assert evaluation.dispatches[0].task == "tasks.extract"
    assert run.statuses() == {"extract": "READY", "left": "PENDING", "right": "PENDING",
                              "join": "PENDING"}


def test_a_diamond_runs_its_join_once_both_sides_succeeded():
    run = Run(DIAMOND, {"day": "d"})
    run.start()
    evaluation = run.succeed("extract", {"n": 7})
    assert [str(d.ref) for d in evaluation.dispatches] == ["left", "right"]
    assert run.dispatch_of("left").args == [7]
    run.succeed("left")
    assert run.status("join") == "PENDING"
    run.succeed("right")
    assert run.status("join") == "READY"
    run.succeed("join")
    assert run.state.status is RunStatus.SUCCEEDED


def test_a_failure_cascades_upstream_failed_through_the_dag_in_one_evaluation():
    chain = workflow({"key": "a"}, {"key": "b", "parents": ["a"]},
                     {"key": "c", "parents": ["b"]}, {"key": "d", "parents": ["c"]})
    run = Run(chain)
    run.start()
    evaluation = run.fail("a")
    assert run.statuses() == {"a": "FAILED", "b": "UPSTREAM_FAILED", "c": "UPSTREAM_FAILED",
                              "d": "UPSTREAM_FAILED"}
    assert evaluation.run_status is RunStatus.FAILED
    assert run.reason("b").text == "trigger rule all_success: `a` (FAILED)"
    assert run.reason("b").details == {"rule": "all_success", "parents": {"a": "FAILED"}}
    assert run.state.reason.code == "leaf_failed"


def test_every_change_is_a_transition_with_its_attempt():
    run = Run(DIAMOND, {"day": "d"})
    run.start()
    run.begin("extract")
    evaluation = run.send(StepEnded("extract", 1, StepStatus.SUCCEEDED, result={"n": 1}))
    assert [(str(t.ref), t.before, t.after, t.attempt) for t in evaluation.transitions] == [
        ("extract", StepStatus.RUNNING, StepStatus.SUCCEEDED, 1),
        ("left", StepStatus.PENDING, StepStatus.READY, 1),
        ("right", StepStatus.PENDING, StepStatus.READY, 1),
    ]


def test_the_evaluator_is_pure_same_input_same_decisions():
    run = Run(DIAMOND, {"day": "d"})
    run.start()
    run.begin("extract")
    event = StepEnded("extract", 1, StepStatus.SUCCEEDED, result={"n": 1})
    first = evaluate(DIAMOND, run.state, event, now_ms=5)
    second = evaluate(DIAMOND, run.state, event, now_ms=5)
    assert first == second


# -- skip propagation and conditions ------------------------------------------------------


def test_a_false_condition_skips_the_step_and_its_subtree():
    definition = workflow(
        {"key": "check"},
        {"key": "load", "parents": ["check"], "condition": "input.full"},
        {"key": "index", "parents": ["load"]},
        {"key": "report", "parents": ["index"]},
        {"key": "cleanup", "parents": ["index"], "trigger_rule": "all_done"},
        {"key": "summary", "parents": ["index"], "trigger_rule": "none_failed"},
    )
    run = Run(definition, {"full": False})
    run.start()
    run.succeed("check")
    assert run.statuses() == {"check": "SUCCEEDED", "load": "SKIPPED", "index": "SKIPPED",
                              "report": "SKIPPED", "cleanup": "READY", "summary": "READY"}
    assert run.reason("load").text == "condition `input.full` is false"
    assert run.reason("load").code == "condition_false"


def test_a_condition_sees_the_input_and_the_ancestors_results_and_statuses():
    definition = workflow(
        {"key": "extract"},
        {"key": "load", "parents": ["extract"],
         "condition": 'steps.extract.status == "SUCCEEDED" && '
                      'size(steps.extract.result.rows) >= input.min_rows'},
    )
    run = Run(definition, {"min_rows": 2})
    run.start()
    run.succeed("extract", {"rows": [1, 2, 3]})
    assert run.status("load") == "READY"


def test_a_condition_that_cannot_be_evaluated_fails_the_step_with_the_reason():
    definition = workflow({"key": "a"}, {"key": "b", "parents": ["a"],
                                         "condition": "steps.a.result.count > 0"})
    run = Run(definition)
    run.start()
    run.succeed("a", {"rows": []})
    assert run.status("b") == "FAILED"
    assert run.reason("b").code == "condition_error"
    assert "steps.a.result.count > 0" in run.reason("b").text
    assert run.state.status is RunStatus.FAILED


def test_a_condition_that_does_not_give_a_boolean_fails_the_step():
    definition = workflow({"key": "a", "condition": "input.n"})
    run = Run(definition, {"n": 3})
    run.start()
    assert run.status("a") == "FAILED"
    assert "not a boolean" in run.reason("a").text


def test_an_argument_that_cannot_be_resolved_fails_the_step_and_names_the_argument():
    definition = workflow({"key": "a"}, {"key": "b", "parents": ["a"],
                                         "kwargs": {"rows": {"$ref": "steps.a.result.rows"}}})
    run = Run(definition)
    run.start()
    run.succeed("a", {"count": 0})
    assert run.status("b") == "FAILED"
    assert run.reason("b").text == "argument kwargs.rows: 'steps.a.result' has no field 'rows'"
    assert run.reason("b").details == {"argument": "kwargs.rows"}


def test_a_task_may_skip_itself_and_the_skip_propagates():
    run = Run(workflow({"key": "a"}, {"key": "b", "parents": ["a"]}))
    run.start()
    run.skip("a")
    assert run.statuses() == {"a": "SKIPPED", "b": "SKIPPED"}
    assert run.state.status is RunStatus.SUCCEEDED


# -- joins are decided only when every parent has ended (USERS.md row 17) -----------------


def test_all_success_join_with_a_skipped_parent_waits_for_the_live_one_and_then_fails():
    definition = workflow({"key": "a", "condition": "false"}, {"key": "b"},
                          {"key": "join", "parents": ["a", "b"]})
    run = Run(definition)
    run.start()
    run.begin("b")
    assert run.status("join") == "PENDING"
    run.fail("b")
    assert run.status("join") == "UPSTREAM_FAILED"


def test_one_success_fires_while_another_parent_still_runs():
    definition = workflow({"key": "fast"}, {"key": "slow"},
                          {"key": "first", "parents": ["fast", "slow"],
                           "trigger_rule": "one_success"})
    run = Run(definition)
    run.start()
    run.begin("slow")
    run.succeed("fast")
    assert run.status("first") == "READY"
    assert run.status("slow") == "RUNNING"


def test_always_runs_at_once_without_waiting_for_its_parents():
    definition = workflow({"key": "a"}, {"key": "audit", "parents": ["a"],
                                         "trigger_rule": "always"})
    evaluation = Run(definition).start()
    assert [str(d.ref) for d in evaluation.dispatches] == ["a", "audit"]


# -- branches -------------------------------------------------------------------------------


BRANCHY = workflow(
    {"key": "route", "kind": "branch", "children": ["fast", "slow", "join"]},
    {"key": "fast", "parents": ["route"]},
    {"key": "slow", "parents": ["route"]},
    {"key": "slow_next", "parents": ["slow"]},
    {"key": "join", "parents": ["route", "fast", "slow_next"],
     "trigger_rule": "none_failed_min_one_success"},
)


def test_a_branch_runs_the_children_it_names_and_skips_the_others_with_their_subtree():
    run = Run(BRANCHY)
    run.start()
    evaluation = run.succeed("route", "fast")
    assert run.statuses()["fast"] == "READY"
    assert run.statuses()["slow"] == "SKIPPED"
    assert run.statuses()["slow_next"] == "SKIPPED"
    assert run.reason("slow").text == "branch `route` chose `fast`"
    assert run.reason("slow").code == "branch_not_taken"
    choice = evaluation.branch_choices[0]
    assert (choice.key, choice.chosen, choice.not_taken) == ("route", ("fast",),
                                                             ("slow", "join"))


def test_a_join_below_the_chosen_child_is_decided_by_its_rule_once_the_live_side_ends():
    run = Run(BRANCHY)
    run.start()
    run.succeed("route", ["fast"])
    assert run.status("join") == "PENDING"  # not skipped although 'route' did not name it
    run.begin("fast")
    assert run.status("join") == "PENDING"  # decided only when every parent has ended
    run.succeed("fast")
    assert run.status("join") == "READY"


def test_a_branch_may_choose_several_children_or_none():
    run = Run(BRANCHY)
    run.start()
    run.succeed("route", ["fast", "slow"])
    assert (run.status("fast"), run.status("slow")) == ("READY", "READY")
    run = Run(BRANCHY)
    run.start()
    run.succeed("route", None)
    assert run.statuses() == {"route": "SUCCEEDED", "fast": "SKIPPED", "slow": "SKIPPED",
                              "slow_next": "SKIPPED", "join": "SKIPPED"}
    assert run.state.status is RunStatus.SUCCEEDED


@pytest.mark.parametrize(("result", "message"), [
    ("nope", "branch `route` chose `nope`, which is not one of its children (`fast`, `slow`, "
             "`join`)"),
    (3, "branch `route` returned int; it must name the children to run"),
    ([1], "branch `route` returned list"),
])
def test_a_branch_result_that_names_no_child_of_it_fails_the_branch(result, message):
    run = Run(BRANCHY)
    run.start()
    run.succeed("route", result)
    assert run.status("route") == "FAILED"
    assert run.reason("route").text.startswith(message)
    assert run.status("fast") == "UPSTREAM_FAILED"


def test_a_not_taken_child_is_skipped_only_once_its_other_parents_have_ended():
    definition = workflow(
        {"key": "route", "kind": "branch", "children": ["a", "b"]},
        {"key": "other"},
        {"key": "a", "parents": ["route"]},
        {"key": "b", "parents": ["route", "other"], "trigger_rule": "all_done"},
    )
    run = Run(definition)
    run.start()
    run.begin("other")
    run.succeed("route", "a")
    assert run.status("b") == "PENDING"
    run.succeed("other")
    assert run.status("b") == "SKIPPED"


def test_nothing_below_an_open_branch_fires_early():
    definition = workflow(
        {"key": "route", "kind": "branch", "children": ["pick"]},
        {"key": "other"},
        {"key": "pick", "parents": ["route", "other"], "trigger_rule": "one_success"},
    )
    run = Run(definition)
    run.start()
    run.begin("route")
    run.succeed("other")
    assert run.status("pick") == "PENDING"  # airflow#55187: 'route' may not choose it
    run.succeed("route", [])
    assert run.status("pick") == "SKIPPED"


# -- map and fan-in -------------------------------------------------------------------------


MAPPED = workflow(
    {"key": "extract"},
    {"key": "load", "kind": "map", "parents": ["extract"],
     "map_over": "steps.extract.result.rows",
     "kwargs": {"row": {"$ref": "map.item"}, "index": {"$ref": "map.index"},
                "day": {"$ref": "input.day"}},
     "retry": {"max_attempts": 2}},
    {"key": "total", "kind": "fan_in", "parents": ["load"]},
)


def test_a_map_step_fans_out_one_instance_per_item_with_its_index():
    run = Run(MAPPED, {"day": "d"})
    run.start()
    evaluation = run.succeed("extract", {"rows": ["x", "y", "z"]})
    assert [str(d.ref) for d in evaluation.dispatches] == ["load[0]", "load[1]", "load[2]"]
    assert [d.kwargs for d in evaluation.dispatches] == [
        {"row": "x", "index": 0, "day": "d"}, {"row": "y", "index": 1, "day": "d"},
        {"row": "z", "index": 2, "day": "d"}]
    assert run.status("load") == "RUNNING"
    assert evaluation.waiting["load"].text == "0 of 3 items done"


def test_a_fan_in_receives_the_results_in_index_order_whatever_order_they_ended_in():
    run = Run(MAPPED, {"day": "d"})
    run.start()
    run.succeed("extract", {"rows": list(range(5))})
    for index in (3, 0, 4, 1):
        run.succeed("load", index * 10, index=index)
    assert run.status("total") == "PENDING"
    run.succeed("load", 20, index=2)
    assert run.step("load").result == [0, 10, 20, 30, 40]
    assert run.dispatch_of("total").args == [[0, 10, 20, 30, 40]]


def test_a_map_instance_is_retried_alone_and_the_map_fails_when_one_item_fails():
    run = Run(MAPPED, {"day": "d"})
    run.start()
    run.succeed("extract", {"rows": ["x", "y"]})
    run.succeed("load", 1, index=0)
    evaluation = run.fail("load", index=1)
    assert [(str(r.ref), r.attempt) for r in evaluation.retries] == [("load[1]", 2)]
    run.send(RetryDue("load", 2, map_index=1))
    assert run.dispatch_of("load", 1).kwargs["row"] == "y"
    run.fail("load", index=1)
    assert run.status("load") == "FAILED"
    assert run.reason("load").text == "1 of 2 items did not succeed: indexes 1"
    assert run.status("total") == "UPSTREAM_FAILED"


def test_a_map_over_an_empty_list_is_skipped_and_so_is_its_fan_in():
    run = Run(MAPPED, {"day": "d"})
    run.start()
    run.succeed("extract", {"rows": []})
    assert (run.status("load"), run.status("total")) == ("SKIPPED", "SKIPPED")
    assert run.reason("load").code == "map_empty"


@pytest.mark.parametrize(("rows", "code"), [({"a": 1}, "map_not_a_list"),
                                             (list(range(10_001)), "map_too_large")])
def test_a_map_over_a_non_list_or_over_the_limit_fails(rows, code):
    run = Run(MAPPED, {"day": "d"})
    run.start()
    run.succeed("extract", {"rows": rows})
    assert run.status("load") == "FAILED"
    assert run.reason("load").code == code


def test_a_map_over_a_literal_list_and_the_input():
    definition = workflow(
        {"key": "each", "kind": "map", "map_over": [1, 2], "args": [{"$ref": "map.item"}]},
        {"key": "per_user", "kind": "map", "map_over": "input.users",
         "args": [{"$ref": "map.item.id"}]})
    evaluation = Run(definition, {"users": [{"id": 7}]}).start()
    assert [(str(d.ref), d.args) for d in evaluation.dispatches] == [
        ("each[0]", [1]), ("each[1]", [2]), ("per_user[0]", [7])]


def test_ten_thousand_instances_are_dispatched_in_one_evaluation():
    run = Run(MAPPED, {"day": "d"})
    run.start()
    evaluation = run.succeed("extract", {"rows": list(range(10_000))})
    assert len(evaluation.dispatches) == 10_000
    assert evaluation.dispatches[-1].kwargs["index"] == 9_999


def _recounted(run: Run) -> int:
    return sum(1 for i in run.step("load").instances if not i.status.is_terminal)


def test_a_maps_count_of_open_instances_is_carried_through_every_instance_change():
    """The count the map's completion is decided on is carried from state to state, not
    counted again: it must equal a fresh count after every kind of instance change (start,
    end, failure into a retry wait, the retry, a final failure, a retry from failure)."""
    run = Run(MAPPED, {"day": "d"})
    run.start()
    run.succeed("extract", {"rows": ["w", "x", "y", "z"]})
    assert run.step("load").open_instances == _recounted(run) == 4
    steps = [lambda: run.begin("load", 0), lambda: run.succeed("load", 1, index=0),
             lambda: run.fail("load", index=1),  # RETRY_WAIT: still open
             lambda: run.send(RetryDue("load", 2, map_index=1)),
             lambda: run.succeed("load", 3, index=2), lambda: run.fail("load", index=1),
             lambda: run.begin("load", 3)]
    for change in steps:
        change()
        assert run.step("load").open_instances == _recounted(run)
    assert _recounted(run) == 1
    run.fail("load", index=3)
    run.send(RetryDue("load", 2, map_index=3))
    run.fail("load", index=3)
    assert run.status("load") == "FAILED" and run.step("load").open_instances == 0
    run.send(RetryFromFailure())
    assert run.step("load").open_instances == _recounted(run) == 2
    run.succeed("load", 5, index=1)
    assert run.step("load").open_instances == _recounted(run) == 1


def test_replacing_an_instance_carries_the_count_of_open_instances_both_ways():
    done, ready = StepState(status=StepStatus.SUCCEEDED), StepState(status=StepStatus.READY)
    step = StepState(status=StepStatus.RUNNING, instances=(done, ready, ready))
    assert step.open_instances == 2
    reopened = step.with_instance(0, ready)
    closed = reopened.with_instance(2, done).with_instance(1, done)
    for state, count in ((reopened, 3), (closed, 1)):
        assert "open_instances" in state.__dict__  # carried over, not counted again
        assert state.open_instances == count
        assert StepState(status=state.status, instances=state.instances).open_instances == count


def test_a_chain_of_evaluations_keeps_every_decision_in_order_and_the_last_state():
    """What the engine keeps of one pass over a run: the decisions of each evaluation, in
    order, and only the last state (each intermediate state of a large map held a copy of
    its instances)."""
    run = Run(MAPPED, {"day": "d"})
    first = run.start()
    chain = EvaluationChain(run.state)
    assert chain.evaluations() == []
    run.succeed("extract", {"rows": [1, 2]})
    run.succeed("load", 10, index=0)
    run.fail("load", index=1)
    one_by_one = run.log[1:]
    for evaluation in one_by_one:
        chain.add(evaluation)
    [merged] = chain.evaluations()
    assert merged.state == run.state and merged.state is not first.state
    for field in ("transitions", "dispatches", "retries", "stops", "branch_choices"):
        assert getattr(merged, field) == tuple(
            d for e in one_by_one for d in getattr(e, field)), field
    assert [str(d.ref) for d in merged.dispatches] == ["load[0]", "load[1]"]
    assert [(str(r.ref), r.attempt) for r in merged.retries] == [("load[1]", 2)]
    assert merged.waiting == one_by_one[-1].waiting


# -- retries ----------------------------------------------------------------------------


RETRYING = workflow({"key": "a", "retry": {"max_attempts": 3, "initial_delay_ms": 1_000,
                                           "non_retryable": ["ValueError"]}})


def test_a_failed_attempt_waits_for_its_retry_then_runs_again():
    run = Run(RETRYING, now_ms=10_000)
    run.start()
    evaluation = run.fail("a")
    assert run.status("a") == "RETRY_WAIT"
    assert [(r.attempt, r.retry_at_ms) for r in evaluation.retries] == [(2, 11_000)]
    assert evaluation.waiting["a"].code == "retry_wait"
    evaluation = run.send(RetryDue("a", 2), now_ms=11_000)
    assert run.status("a") == "READY"
    assert evaluation.dispatches[0].attempt == 2
    run.succeed("a", "ok")
    assert run.state.status is RunStatus.SUCCEEDED


def test_retry_delays_use_full_jitter_when_given_a_random_source():
    run = Run(RETRYING, now_ms=0, rng=random.Random(3))
    run.start()
    retry_at = run.fail("a").retries[0].retry_at_ms
    assert 0 <= retry_at <= 1_000


def test_retries_stop_when_the_attempts_are_spent_or_the_error_is_not_retryable():
    run = Run(RETRYING)
    run.start()
    for attempt in (1, 2):
        run.fail("a")
        run.send(RetryDue("a", attempt + 1))
    run.fail("a")
    assert run.status("a") == "FAILED"
    assert run.reason("a").details == {"error_type": "tasks.Boom", "attempts": 3}
    run = Run(RETRYING)
    run.start()
    run.fail("a", error_type="builtins.ValueError", error="bad row")
    assert run.status("a") == "FAILED"
    assert run.reason("a").text == "builtins.ValueError: bad row"


# -- events that do not fit ----------------------------------------------------------------


def test_a_late_or_repeated_result_is_refused():
    run = Run(RETRYING)
    run.start()
    run.fail("a")
    with pytest.raises(InvalidEvent, match="RETRY_WAIT at attempt 2, not RUNNING at attempt 1"):
        run.send(StepEnded("a", 1, StepStatus.SUCCEEDED))
    run.send(RetryDue("a", 2))
    run.succeed("a")
    with pytest.raises(InvalidEvent):
        run.send(StepEnded("a", 2, StepStatus.SUCCEEDED))


@pytest.mark.parametrize("event", [
    StepStarted("nope", 1), StepStarted("a", 2), StepEnded("a", 1, StepStatus.SUCCEEDED),
    RetryDue("a", 1), StepStarted("a", 1, map_index=0)])
def test_events_for_unknown_steps_or_other_states_are_refused(event):
    run = Run(RETRYING)
    run.start()
    with pytest.raises(InvalidEvent):
        run.send(event)


def test_a_map_instance_cannot_skip_itself():
    run = Run(MAPPED, {"day": "d"})
    run.start()
    run.succeed("extract", {"rows": [1]})
    run.begin("load", 0)
    with pytest.raises(InvalidEvent, match="cannot end SKIPPED"):
        run.send(StepEnded("load", 1, StepStatus.SKIPPED, map_index=0))


# -- cancellation and the run timeout -------------------------------------------------------


def test_cancelling_stops_running_steps_and_pending_ones_never_start():
    run = Run(DIAMOND, {"day": "d"})
    run.start()
    run.succeed("extract", {"n": 1})
    run.begin("left")
    evaluation = run.send(CancelRequested("alice"))
    assert run.state.status is RunStatus.CANCELLING
    assert [(str(s.ref), s.action) for s in evaluation.stops] == [("left", "cancel")]
    assert run.statuses() == {"extract": "SUCCEEDED", "left": "RUNNING", "right": "CANCELLED",
                              "join": "CANCELLED"}
    assert evaluation.waiting["left"].code == "stopping"
    evaluation = run.end("left", StepStatus.CANCELLED)
    assert evaluation.run_status is RunStatus.CANCELLED
    assert evaluation.dispatches == ()
    assert run.state.reason.text == "the run was cancelled by alice"


def test_a_result_arriving_while_cancelling_is_kept_but_starts_nothing():
    run = Run(DIAMOND, {"day": "d"})
    run.start()
    run.begin("extract")
    run.send(CancelRequested())
    evaluation = run.succeed("extract", {"n": 1})
    assert evaluation.dispatches == ()
    assert run.status("extract") == "SUCCEEDED"
    assert run.state.status is RunStatus.CANCELLED


def test_a_failure_while_cancelling_is_not_retried():
    run = Run(RETRYING)
    run.start()
    run.begin("a")
    run.send(CancelRequested())
    evaluation = run.fail("a")
    assert evaluation.retries == ()
    assert run.state.status is RunStatus.CANCELLED


def test_cancelling_twice_is_cancelling_once_and_a_finished_run_cannot_be_cancelled():
    run = Run(DIAMOND, {"day": "d"})
    run.start()
    run.begin("extract")
    run.send(CancelRequested())
    assert run.send(CancelRequested()).transitions == ()
    run.end("extract", StepStatus.CANCELLED)
    with pytest.raises(InvalidEvent, match="the run is CANCELLED"):
        run.send(CancelRequested())


@pytest.mark.parametrize(("policy", "action", "status"), [
    ("terminate", "terminate", "RUNNING"), ("request_cancel", "request_cancel", "RUNNING"),
    ("abandon", "abandon", "CANCELLED")])
def test_a_running_sub_workflow_is_stopped_by_its_parent_close_policy(policy, action, status):
    definition = workflow({"key": "child", "kind": "sub_workflow", "sub_workflow": "billing",
                           "parent_close_policy": policy, "kwargs": {"month": 3}})
    run = Run(definition)
    dispatch = run.start().dispatches[0]
    assert (dispatch.sub_workflow, dispatch.kwargs, dispatch.task) == ("billing",
                                                                       {"month": 3}, None)
    run.begin("child")
    evaluation = run.send(CancelRequested())
    assert [s.action for s in evaluation.stops] == [action]
    assert run.status("child") == status


def test_a_run_past_its_timeout_is_stopped_and_ends_timed_out():
    definition = workflow({"key": "a"}, {"key": "b", "parents": ["a"]}, run_timeout_s=60)
    run = Run(definition, now_ms=1_000)
    run.start()
    run.begin("a")
    assert run.send(DeadlineCheck(), now_ms=60_999).transitions == ()
    evaluation = run.send(DeadlineCheck(), now_ms=61_000)
    assert run.state.status is RunStatus.TIMING_OUT
    assert [str(s.ref) for s in evaluation.stops] == ["a"]
    run.end("a", StepStatus.CANCELLED)
    assert run.state.status is RunStatus.TIMED_OUT
    assert run.state.reason.code == "run_timeout"


def test_cancelling_a_map_cancels_its_waiting_instances_and_stops_the_running_ones():
    run = Run(MAPPED, {"day": "d"})
    run.start()
    run.succeed("extract", {"rows": [1, 2, 3]})
    run.begin("load", 1)
    evaluation = run.send(CancelRequested())
    assert [str(s.ref) for s in evaluation.stops] == ["load[1]"]
    assert [run.status("load", i) for i in range(3)] == ["CANCELLED", "RUNNING", "CANCELLED"]
    run.end("load", StepStatus.CANCELLED, index=1)
    assert run.status("load") == "CANCELLED"
    assert run.state.status is RunStatus.CANCELLED


# -- the run's outcome ------------------------------------------------------------------------


def test_the_run_fails_when_a_leaf_failed_and_succeeds_when_leaves_succeeded_or_skipped():
    definition = workflow({"key": "a"}, {"key": "b", "parents": ["a"]},
                          {"key": "alert", "parents": ["a"], "trigger_rule": "one_failed"})
    run = Run(definition)
    run.start()
    run.succeed("a")
    run.succeed("b")
    assert (run.status("alert"), run.state.status) == ("SKIPPED", RunStatus.SUCCEEDED)


def test_a_failure_handled_by_a_succeeding_leaf_still_fails_the_run_through_other_leaves():
    definition = workflow({"key": "a"}, {"key": "b", "parents": ["a"]},
                          {"key": "alert", "parents": ["a"], "trigger_rule": "one_failed"})
    run = Run(definition)
    run.start()
    run.fail("a")
    run.succeed("alert")
    assert run.state.status is RunStatus.FAILED
    assert run.state.reason.details == {"steps": {"b": "UPSTREAM_FAILED"}}


def test_as_in_airflow_a_succeeding_cleanup_leaf_makes_the_run_succeed():
    definition = workflow({"key": "a"}, {"key": "cleanup", "parents": ["a"],
                                         "trigger_rule": "all_done"})
    run = Run(definition)
    run.start()
    run.fail("a")
    run.succeed("cleanup")
    assert run.state.status is RunStatus.SUCCEEDED


# -- why is it waiting -------------------------------------------------------------------------


def test_every_step_that_has_not_ended_says_why_it_waits():
    run = Run(DIAMOND, {"day": "d"})
    run.start()
    run.succeed("extract", {"n": 1})
    run.begin("left")
    reasons = waiting_reasons(DIAMOND, run.state)
    assert set(reasons) == {"right", "join"}
    assert reasons["right"].to_dict() == {"code": "queued", "attempt": 1,
                                          "text": "ready (attempt 1); waiting for a worker"}
    assert reasons["join"].to_dict() == {
        "code": "waiting_for_parents", "text": "waiting for `left` (RUNNING), `right` (READY)",
        "parents": {"left": "RUNNING", "right": "READY"}, "rule": "all_success"}


def test_a_concurrency_limit_is_a_reason_to_wait_before_a_run_starts():
    definition = workflow({"key": "a"}, max_concurrent_runs=5)
    assert admission(definition, 4) is None
    reason = admission(definition, 5)
    assert reason.text == "concurrency limit 5 reached"
    assert reason.code == "concurrency_limit"
    assert admission(workflow({"key": "a"}), 10_000) is None


def test_a_run_that_ended_cannot_be_started_again():
    run = Run(workflow({"key": "a"}))
    run.start()
    run.succeed("a")
    with pytest.raises(InvalidEvent):
        run.send(RunStarted())


def test_an_unknown_outcome_is_refused():
    run = Run(workflow({"key": "a"}))
    run.start()
    run.begin("a")
    with pytest.raises(InvalidEvent, match="unknown outcome 'DONE'"):
        run.send(StepEnded("a", 1, "DONE"))
