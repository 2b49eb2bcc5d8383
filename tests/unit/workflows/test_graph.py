"""Graph helpers: deterministic order, named cycles, ancestors and descendants."""

from __future__ import annotations

from workflows.graph import (
    ancestors_map,
    children_map,
    descendants_map,
    find_cycle,
    topological_order,
)

DIAMOND = {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}


def test_the_order_puts_parents_first_and_otherwise_keeps_the_definition_order():
    assert topological_order({"z": (), "y": ("x",), "x": (), "w": ("z",)}) == (
        ["z", "x", "y", "w"], [])


def test_steps_on_or_below_a_cycle_are_left_out_of_the_order():
    order, left = topological_order({"a": (), "b": ("c",), "c": ("b",), "d": ("c",)})
    assert (order, left) == (["a"], ["b", "c", "d"])


def test_a_cycle_is_named_from_its_first_defined_step_back_to_itself():
    assert find_cycle({"a": ("c",), "b": ("a",), "c": ("b",)}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": (), "d": ("b",), "b": ("d",)}) == ["d", "b", "d"]
    assert find_cycle(DIAMOND) is None


def test_ancestors_and_descendants_of_a_diamond():
    order, _ = topological_order(DIAMOND)
    assert ancestors_map(DIAMOND, order)["d"] == {"a", "b", "c"}
    children = children_map(DIAMOND)
    assert children == {"a": ("b", "c"), "b": ("d",), "c": ("d",), "d": ()}
    assert descendants_map(children, order)["a"] == {"b", "c", "d"}
