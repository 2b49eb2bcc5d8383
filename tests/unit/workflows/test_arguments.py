"""Argument references: the syntax, and resolving it against a run."""

from __future__ import annotations

import re

import pytest

from workflows.arguments import (
    Literal,
    Reference,
    TemplateError,
    compile_template,
    parse_reference,
    resolve_arguments,
)
from workflows.definitions import StepDefinition
from workflows.errors import ArgumentError
from workflows.runs import StepState
from workflows.states import StepStatus

DONE = StepStatus.SUCCEEDED
STATES = {
    "extract": StepState(DONE, {"rows": [{"id": 1}, {"id": 2}], "count": 2}),
    "audit": StepState(StepStatus.SKIPPED),
}
INPUT = {"customer": {"id": "c-9"}, "days": [3, 4]}


def step(**fields) -> StepDefinition:
    return StepDefinition(key="load", task="t.load", parents=("extract", "audit"), **fields)


def test_references_resolve_to_the_input_and_to_ancestors_results_and_statuses():
    resolved = resolve_arguments(step(
        args=[{"$ref": "input.customer.id"}, {"$ref": "input.days.1"}],
        kwargs={"rows": {"$ref": "steps.extract.result.rows"},
                "first": {"$ref": "steps.extract.result.rows.0.id"},
                "audit": {"$ref": "steps.audit.status"},
                "everything": {"$ref": "input"},
                "nested": [{"n": {"$ref": "steps.extract.result.count"}}]}),
        INPUT, STATES)
    assert resolved.args == ["c-9", 4]
    assert resolved.kwargs == {"rows": [{"id": 1}, {"id": 2}], "first": 1, "audit": "SKIPPED",
                               "everything": INPUT, "nested": [{"n": 2}]}


def test_plain_data_passes_through_and_a_literal_escapes_a_reference():
    resolved = resolve_arguments(step(kwargs={
        "query": {"$gt": 3, "name": "x"},
        "raw": {"$literal": {"$ref": "input.customer"}}}), INPUT, STATES)
    assert resolved.kwargs == {"query": {"$gt": 3, "name": "x"},
                               "raw": {"$ref": "input.customer"}}


def test_map_references_give_the_instance_item_and_index():
    mapped = StepDefinition(key="each", task="t", kind="map", map_over="input.days",
                            kwargs={"day": {"$ref": "map.item"}, "i": {"$ref": "map.index"}})
    resolved = resolve_arguments(mapped, INPUT, {}, map_item=4, map_index=1)
    assert resolved.kwargs == {"day": 4, "i": 1}


@pytest.mark.parametrize(("ref", "message"), [
    ("input.customer.name", "'input.customer' has no field 'name'"),
    ("input.days.5", "'input.days' is a list of 2: no item '5'"),
    ("input.customer.id.x", "'input.customer.id' is a string, it has no field 'x'"),
    ("steps.audit.result", "step `audit` is SKIPPED: it has no result"),
    ("steps.extract.result.rows.x", "'steps.extract.result.rows' is a list of 2: no item 'x'"),
])
def test_a_reference_that_cannot_be_resolved_names_the_argument_and_why(ref, message):
    with pytest.raises(ArgumentError) as caught:
        resolve_arguments(step(kwargs={"value": [{"$ref": ref}]}), INPUT, STATES)
    assert caught.value.path == "kwargs.value[0]"
    assert caught.value.message == message


def test_a_default_stands_in_for_a_missing_value_or_a_step_without_result():
    resolved = resolve_arguments(step(args=[
        {"$ref": "steps.audit.result", "default": []},
        {"$ref": "input.customer.name", "default": None}]), INPUT, STATES)
    assert resolved.args == [[], None]


def test_a_step_that_has_not_run_has_no_result():
    with pytest.raises(ArgumentError, match="step `extract` has not run in this run"):
        resolve_arguments(step(args=[{"$ref": "steps.extract.result"}]), INPUT, {})


@pytest.mark.parametrize(("text", "message"), [
    ("", "a reference is a dotted path"),
    ("output.x", "must start with one of input, steps, map"),
    ("steps.extract", "must read steps.<key>.result[...] or steps.<key>.status"),
    ("steps.extract.rows", "must read steps.<key>.result[...]"),
    ("steps.extract.status.x", "a status has no fields"),
    ("map.value", "must read map.item[...] or map.index"),
    ("map.index.x", "an index has no fields"),
    ("input..x", "has an empty segment"),
])
def test_malformed_references_are_refused(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_reference(text)


def test_a_parsed_reference_names_its_parts():
    assert parse_reference("steps.extract.result.rows.0") == Reference(
        "steps.extract.result.rows.0", "steps", "extract", "result", ("rows", "0"))


def test_templates_compile_references_and_literals_and_name_a_malformed_one():
    template = compile_template({"a": [{"$ref": "input.x"}], "b": {"$literal": 1}}, "kwargs")
    assert isinstance(template["a"][0], Reference)
    assert template["b"] == Literal(1)
    with pytest.raises(TemplateError) as caught:
        compile_template({"a": [1, {"$ref": 5}]}, "kwargs")
    assert caught.value.path == "kwargs.a[1]"
