"""Workflow definitions: parsing, the stable dict form, and every validation error's path."""

from __future__ import annotations

import copy

import pytest

from scheduler.retry import RetryPolicy
from workflows.conditions import Condition
from workflows.definitions import (
    MAX_STEPS,
    ParentClosePolicy,
    StepDefinition,
    StepKind,
    WorkflowDefinition,
)
from workflows.errors import DefinitionError
from workflows.rules import TriggerRule

ETL = {
    "name": "nightly-etl",
    "description": "the nightly load",
    "run_timeout_s": 3600,
    "max_concurrent_runs": 5,
    "steps": [
        {"key": "extract", "task": "etl.extract", "kwargs": {"day": {"$ref": "input.day"}},
         "retry": {"max_attempts": 3}, "timeout_s": 600, "queue": "etl"},
        {"key": "route", "kind": "branch", "task": "etl.route", "parents": ["extract"],
         "children": ["load", "report"]},
        {"key": "load", "kind": "map", "task": "etl.load_one", "parents": ["route"],
         "map_over": "steps.extract.result.rows", "kwargs": {"row": {"$ref": "map.item"}}},
        {"key": "total", "kind": "fan_in", "task": "etl.total", "parents": ["load"]},
        {"key": "report", "task": "etl.report", "parents": ["route"],
         "condition": "input.send_report && steps.extract.result.count > 0"},
        {"key": "notify", "task": "etl.notify", "parents": ["total", "report"],
         "trigger_rule": "none_failed_min_one_success"},
        {"key": "billing", "kind": "sub_workflow", "sub_workflow": "monthly-billing",
         "parent_close_policy": "request_cancel", "parents": ["notify"]},
    ],
}


def test_a_definition_parses_into_typed_steps():
    definition = WorkflowDefinition.from_dict(ETL)
    extract = definition.step("extract")
    assert extract.retry == RetryPolicy(max_attempts=3)
    assert (extract.timeout_s, extract.queue, extract.kind) == (600, "etl", StepKind.TASK)
    assert definition.step("notify").trigger_rule is TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS
    assert definition.step("report").condition.step_keys == {"extract"}
    assert definition.step("billing").parent_close_policy is ParentClosePolicy.REQUEST_CANCEL
    assert definition.order == ("extract", "route", "load", "total", "report", "notify",
                                "billing")
    assert definition.leaves == ("billing",)
    assert definition.ancestors_of("total") == {"extract", "route", "load"}
    assert definition.descendants_of("route") == {"load", "total", "report", "notify",
                                                  "billing"}
    assert definition.children_of("route") == ("load", "report")


def test_to_dict_writes_every_field_and_parses_back_to_the_same_definition():
    definition = WorkflowDefinition.from_dict(ETL)
    data = definition.to_dict()
    assert data["steps"][0] == {
        "key": "extract", "kind": "task", "task": "etl.extract", "args": [],
        "kwargs": {"day": {"$ref": "input.day"}}, "parents": [], "trigger_rule": "all_success",
        "condition": None, "retry": {"max_attempts": 3, "initial_delay_ms": 1000,
                                     "multiplier": 2.0, "max_delay_ms": 300000,
                                     "non_retryable": []},
        "timeout_s": 600, "queue": "etl"}
    assert data["steps"][2]["map_over"] == "steps.extract.result.rows"
    assert data["steps"][6]["parent_close_policy"] == "request_cancel"
    assert WorkflowDefinition.from_dict(data) == definition
    assert WorkflowDefinition.from_dict(data).to_dict() == data


def test_the_fingerprint_ignores_spelled_out_defaults_and_sees_every_change():
    definition = WorkflowDefinition.from_dict(ETL)
    spelled = copy.deepcopy(ETL)
    spelled["steps"][0]["trigger_rule"] = "all_success"
    spelled["steps"][0]["args"] = []
    assert WorkflowDefinition.from_dict(spelled).fingerprint() == definition.fingerprint()
    changed = copy.deepcopy(ETL)
    changed["steps"][0]["retry"] = {"max_attempts": 4}
    assert WorkflowDefinition.from_dict(changed).fingerprint() != definition.fingerprint()
    assert len(definition.fingerprint()) == 64


def test_steps_can_be_built_directly_in_python():
    definition = WorkflowDefinition(name="py", steps=[
        StepDefinition(key="a", task="t.a", retry={"max_attempts": 2}),
        StepDefinition(key="b", task="t.b", parents=["a"], trigger_rule="all_done",
                       condition="input.go"),
    ])
    b = definition.step("b")
    assert b.trigger_rule is TriggerRule.ALL_DONE
    assert isinstance(b.condition, Condition)
    assert b.parents == ("a",)
    assert definition.step("a").retry.max_attempts == 2


def test_a_step_built_directly_reports_its_fields_under_its_key():
    with pytest.raises(DefinitionError) as caught:
        StepDefinition(key="load", task="t", trigger_rule="all_sucess", timeout_s=-1)
    assert caught.value.paths() == ["steps.load.trigger_rule", "steps.load.timeout_s"]


def _with(mutate) -> dict:
    data = copy.deepcopy(ETL)
    mutate(data)
    return data


def _step(data: dict, key: str) -> dict:
    return next(s for s in data["steps"] if s["key"] == key)


def _problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as caught:
        WorkflowDefinition.from_dict(data)
    return [(p.path, p.message) for p in caught.value.problems]


INVALID = [
    ("unknown parent",
     lambda d: _step(d, "notify")["parents"].append("lod"),
     "steps.notify.parents[2]", "unknown step 'lod' (did you mean 'load'?)"),
    ("unknown trigger rule",
     lambda d: _step(d, "notify").update(trigger_rule="all_sucess"),
     "steps.notify.trigger_rule", "unknown rule 'all_sucess' (expected one of all_success, "),
    ("cycle",
     lambda d: _step(d, "extract").update(parents=["notify"]),
     "steps.extract.parents",
     "cycle extract → route → load → total → notify → extract"),
    ("duplicate key",
     lambda d: d["steps"].append({"key": "load", "task": "x"}),
     "steps[7].key", "duplicate key 'load' (also steps[2])"),
    ("own parent",
     lambda d: _step(d, "total").update(parents=["total"]),
     "steps.total.parents[0]", "a step cannot be its own parent"),
    ("parent twice",
     lambda d: _step(d, "total").update(parents=["load", "load"]),
     "steps.total.parents[1]", "'load' is listed twice"),
    ("fan-in over no parents",
     lambda d: _step(d, "total").update(parents=[]),
     "steps.total.parents", "a fan_in step joins its parents' results, but it has no parents"),
    ("fan-in without a map",
     lambda d: _step(d, "total").update(parents=["route"]),
     "steps.total.parents", "a fan_in step needs a map step among its parents"),
    ("joining rule over no parents",
     lambda d: _step(d, "extract").update(trigger_rule="one_success"),
     "steps.extract.trigger_rule", "rule 'one_success' joins over the step's parents, but it "
                                   "has none"),
    ("reference to a non-ancestor",
     lambda d: _step(d, "report").update(kwargs={"n": {"$ref": "steps.total.result"}}),
     "steps.report.kwargs.n", "'steps.total' is not an ancestor of 'report'"),
    ("reference to an unknown step",
     lambda d: _step(d, "report").update(args=[{"$ref": "steps.extrct.result"}]),
     "steps.report.args[0]", "unknown step 'extrct' (did you mean 'extract'?)"),
    ("reference to itself",
     lambda d: _step(d, "report").update(args=[{"$ref": "steps.report.status"}]),
     "steps.report.args[0]", "step 'report' cannot refer to itself"),
    ("condition naming a non-ancestor",
     lambda d: _step(d, "report").update(condition="steps.total.status == 'SUCCEEDED'"),
     "steps.report.condition", "'steps.total' is not an ancestor of 'report'"),
    ("bad expression",
     lambda d: _step(d, "report").update(condition="input.send_report &&"),
     "steps.report.condition", "invalid expression: at line 1, column "),
    ("unknown name in an expression",
     lambda d: _step(d, "report").update(condition="inptu.send_report"),
     "steps.report.condition", "unknown name 'inptu'"),
    ("malformed reference",
     lambda d: _step(d, "report").update(kwargs={"x": {"$ref": "output.x"}}),
     "steps.report.kwargs.x", "must start with one of input, steps, map"),
    ("map reference outside a map",
     lambda d: _step(d, "report").update(kwargs={"x": {"$ref": "map.item"}}),
     "steps.report.kwargs.x", "'map.item' is only defined in a map step"),
    ("map over a non-list",
     lambda d: _step(d, "load").update(map_over=5),
     "steps.load.map_over", "map_over must be a reference to a list"),
    ("map over a status",
     lambda d: _step(d, "load").update(map_over="steps.extract.status"),
     "steps.load.map_over", "is not a list reference"),
    ("map over a non-ancestor",
     lambda d: _step(d, "load").update(map_over="steps.notify.result"),
     "steps.load.map_over", "'steps.notify' is not an ancestor of 'load'"),
    ("fan-out over the limit",
     lambda d: _step(d, "load").update(map_over=list(range(10_001))),
     "steps.load.map_over", "a map fans out to at most 10,000 items, this list has 10,001"),
    ("map without map_over",
     lambda d: _step(d, "load").pop("map_over"),
     "steps.load.map_over", "map_over must be a reference to a list"),
    ("map_over on a task",
     lambda d: _step(d, "report").update(map_over="input.x"),
     "steps.report.map_over", "only a map step has map_over"),
    ("branch child that is not a child",
     lambda d: _step(d, "route")["children"].append("total"),
     "steps.route.children[2]", "'total' does not list 'route' among its parents"),
    ("branch child not declared",
     lambda d: _step(d, "route").update(children=["load"]),
     "steps.route.children", "'report' lists 'route' as a parent but is not among its children"),
    ("branch without children",
     lambda d: _step(d, "route").update(children=[]),
     "steps.route.children", "a branch step declares the children it chooses between"),
    ("always after a branch",
     lambda d: _step(d, "report").update(trigger_rule="always", condition=None),
     "steps.report.trigger_rule", "rule 'always' does not wait for its parents, so it cannot "
                                  "follow branch 'route'"),
    ("always referring to a parent",
     lambda d: _step(d, "notify").update(trigger_rule="always",
                                         args=[{"$ref": "steps.total.result"}]),
     "steps.notify.args[0]", "rule 'always' does not wait for its parents"),
    ("children on a task",
     lambda d: _step(d, "report").update(children=["notify"]),
     "steps.report.children", "only a branch step declares children"),
    ("unknown kind",
     lambda d: _step(d, "report").update(kind="mapp"),
     "steps.report.kind", "unknown kind 'mapp' (expected one of task, branch, map, fan_in, "),
    ("sub-workflow with a task",
     lambda d: _step(d, "billing").update(task="x"),
     "steps.billing.task", "a sub_workflow step names a workflow in 'sub_workflow'"),
    ("sub-workflow without a name",
     lambda d: _step(d, "billing").pop("sub_workflow"),
     "steps.billing.sub_workflow", "a sub_workflow step names the workflow it starts"),
    ("unknown parent-close policy",
     lambda d: _step(d, "billing").update(parent_close_policy="kill"),
     "steps.billing.parent_close_policy", "unknown parent_close_policy 'kill' (expected one "
                                          "of terminate, request_cancel, abandon)"),
    ("a workflow starting itself",
     lambda d: _step(d, "billing").update(sub_workflow="nightly-etl"),
     "steps.billing.sub_workflow", "a workflow cannot start itself"),
    ("task missing",
     lambda d: _step(d, "report").pop("task"),
     "steps.report.task", "a task step needs a task name"),
    ("bad key",
     lambda d: d["steps"].append({"key": "a.b", "task": "x"}),
     "steps[7].key", "'a.b' is not a step key"),
    ("unknown step field",
     lambda d: _step(d, "report").update(parnets=[]),
     "steps.report.parnets", "unknown field (did you mean 'parents'?)"),
    ("unknown retry field",
     lambda d: _step(d, "extract").update(retry={"max_attemps": 3}),
     "steps.extract.retry.max_attemps", "unknown field (did you mean 'max_attempts'?)"),
    ("invalid retry policy",
     lambda d: _step(d, "extract").update(retry={"max_attempts": 0}),
     "steps.extract.retry.max_attempts", "Is 0; use a whole number from 1 to 101."),
    ("retry delay over the bound every job's policy has",
     lambda d: _step(d, "extract").update(retry={"initial_delay_ms": 10**9}),
     "steps.extract.retry.initial_delay_ms",
     "Is 1000000000; use a whole number of milliseconds from 0 to 86400000."),
    ("args not a list",
     lambda d: _step(d, "extract").update(args={"a": 1}),
     "steps.extract.args", "args must be a list, not an object"),
    ("reference with extra keys",
     lambda d: _step(d, "extract").update(kwargs={"d": {"$ref": "input.day", "x": 1}}),
     "steps.extract.kwargs.d", "a reference takes only '$ref' and 'default', not x"),
    ("negative timeout",
     lambda d: _step(d, "extract").update(timeout_s=0),
     "steps.extract.timeout_s", "timeout_s must be a positive number of seconds"),
    ("bad run timeout",
     lambda d: d.update(run_timeout_s="1h"),
     "run_timeout_s", "a positive number of seconds, not '1h'"),
    ("bad concurrency limit",
     lambda d: d.update(max_concurrent_runs=0),
     "max_concurrent_runs", "a whole number of at least 1, not 0"),
    ("bad name",
     lambda d: d.update(name=""),
     "name", "'' is not a workflow name"),
    ("unknown workflow field",
     lambda d: d.update(stpes=[]),
     "stpes", "unknown field (did you mean 'steps'?)"),
    ("no steps",
     lambda d: d.update(steps=[]),
     "steps", "a workflow needs at least one step"),
    ("steps not a list",
     lambda d: d.update(steps={"a": {}}),
     "steps", "a workflow needs a list of steps"),
    ("a step that is not an object",
     lambda d: d["steps"].append("load"),
     "steps[7]", "a step is an object, not a string"),
]


@pytest.mark.parametrize(("mutate", "path", "message"), [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_an_invalid_definition_is_refused_naming_the_field(mutate, path, message):
    problems = _problems(_with(mutate))
    assert any(p == path and message in m for p, m in problems), problems


def test_an_empty_join_is_refused_when_the_workflow_is_defined():
    """USERS.md row 20: a join over an empty set must not complete at once."""
    problems = _problems({"name": "w", "steps": [
        {"key": "gather", "kind": "fan_in", "task": "t"},
        {"key": "any", "task": "t", "trigger_rule": "one_success"}]})
    assert [p for p, _ in problems] == ["steps.gather.parents", "steps.any.trigger_rule"]


def test_the_problems_of_every_step_are_reported_at_once():
    problems = _problems({"name": "", "steps": [
        {"key": "a", "task": "t", "trigger_rule": "nope", "timeout_s": -1},
        {"key": "b", "task": "t", "condition": "input.x +"},
        {"key": "d", "task": "t", "parents": ["zz"]},
        {"key": "c", "task": "t", "parents": ["d"], "kwargs": {"x": {"$ref": "steps.b.result"}}},
    ]})
    assert [p for p, _ in problems] == [
        "steps.a.trigger_rule", "steps.a.timeout_s", "steps.b.condition", "name",
        "steps.d.parents[0]", "steps.c.kwargs.x"]


def test_a_parent_whose_own_fields_are_wrong_is_not_also_reported_unknown():
    problems = _problems({"name": "w", "steps": [
        {"key": "a", "task": "t", "trigger_rule": "nope"},
        {"key": "b", "task": "t", "parents": ["a"]}]})
    assert [p for p, _ in problems] == ["steps.a.trigger_rule"]


def test_steps_without_a_usable_key_are_named_by_index():
    problems = _problems({"name": "w", "steps": [{"task": "t", "trigger_rule": "x"}]})
    assert [p for p, _ in problems] == ["steps[0].key", "steps[0].trigger_rule"]


def test_at_most_a_thousand_steps():
    steps = [{"key": f"s{i}", "task": "t"} for i in range(MAX_STEPS + 1)]
    problems = _problems({"name": "w", "steps": steps})
    assert problems == [("steps", "a workflow has at most 1,000 steps, this one has 1,001")]
    assert len(WorkflowDefinition.from_dict({"name": "w", "steps": steps[:-1]}).order) == 1_000


def test_a_chain_of_a_thousand_steps_each_referring_to_the_one_before_is_valid():
    steps = [{"key": "s0", "task": "t"}] + [
        {"key": f"s{i}", "task": "t", "parents": [f"s{i - 1}"],
         "args": [{"$ref": f"steps.s{i - 1}.result"}]} for i in range(1, MAX_STEPS)]
    definition = WorkflowDefinition.from_dict({"name": "w", "steps": steps})
    assert len(definition.ancestors_of("s999")) == 999


def test_a_definition_must_be_an_object():
    assert _problems([1, 2]) == [("", "a workflow definition is a JSON object")]


def test_definition_errors_read_as_one_line_each_joined():
    with pytest.raises(DefinitionError) as caught:
        WorkflowDefinition.from_dict({"name": "w", "steps": [{"key": "a", "task": "t",
                                                              "parents": ["lod"]}]})
    assert str(caught.value) == "steps.a.parents[0]: unknown step 'lod'"
    assert caught.value.problems[0].to_dict() == {"path": "steps.a.parents[0]",
                                                  "message": "unknown step 'lod'"}


def test_definitions_are_hashable_by_what_they_mean():
    a = WorkflowDefinition.from_dict(ETL)
    b = WorkflowDefinition.from_dict(copy.deepcopy(ETL))
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert hash(a.step("extract")) == hash(b.step("extract"))


def test_a_sub_workflow_takes_its_input_as_kwargs_only():
    problems = _problems(_with(lambda d: _step(d, "billing").update(args=[1])))
    assert ("steps.billing.args",
            "a sub_workflow step's run input is its kwargs: it takes no args") in problems
