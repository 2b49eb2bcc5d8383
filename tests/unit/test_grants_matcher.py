"""The grant patterns of chronocore.grants: exact names and globs, to the corners."""

from __future__ import annotations

import pytest

from chronocore.grants import compile_rules, pattern_matches, pattern_problem, rules_grant


@pytest.mark.parametrize(("pattern", "name"), [
    ("billing.tasks.charge", "billing.tasks.charge"),
    ("billing.*", "billing.tasks.charge"),
    ("billing.*", "billing."),
    ("*", "anything.at.all"),
    ("*", "x"),
    ("*.report", "chrono.demo.report"),
    ("billing.tasks.?harge", "billing.tasks.charge"),
    ("queue-[ab]", "queue-a"),
    ("etl:*", "etl:extract"),
])
def test_a_pattern_matches_the_names_it_covers(pattern, name):
    assert pattern_matches(pattern, name)


@pytest.mark.parametrize(("pattern", "name"), [
    ("billing.tasks.charge", "billing.tasks.charge2"),  # exact means exact, no prefix
    ("billing.tasks.charge", "billing.tasks"),
    ("billing.*", "billing"),  # the dot is part of the pattern
    ("billing.*", "billingx.tasks"),
    ("billing.*", "other.billing.tasks"),  # anchored at the start
    ("Billing.*", "billing.tasks.charge"),  # case-sensitive, as Celery's names are
    ("billing.*", "BILLING.TASKS"),
    ("billing.tasks.?harge", "billing.tasks.ccharge"),
    ("queue-[ab]", "queue-c"),
    ("*", ""),  # an empty name is never granted
    ("", ""),
    ("", "billing.tasks.charge"),  # an empty pattern matches nothing
])
def test_a_pattern_does_not_match_other_names(pattern, name):
    assert not pattern_matches(pattern, name)


def test_regex_characters_in_a_pattern_are_literal():
    assert pattern_matches("a.b", "a.b")
    assert not pattern_matches("a.b", "axb")  # '.' is a dot, not any character
    assert pattern_matches("a+b", "a+b")
    assert not pattern_matches("a+b", "aab")


@pytest.mark.parametrize("pattern", ["", " ", "billing .*", "billing.*\n", "a\x00b", "a\tb",
                                     "x" * 201, None, 7])
def test_an_unusable_pattern_is_refused_with_a_reason_and_matches_nothing(pattern):
    assert pattern_problem(pattern)
    if isinstance(pattern, str):
        assert not pattern_matches(pattern, pattern)
        assert compile_rules([(pattern, "*")]) == ()


@pytest.mark.parametrize("pattern", ["*", "billing.*", "billing.tasks.charge", "q-[ab]", "?"])
def test_a_usable_pattern_has_no_problem(pattern):
    assert pattern_problem(pattern) is None


def test_a_task_is_granted_only_on_the_queues_of_its_grant():
    rules = compile_rules([("billing.*", "billing"), ("reports.daily", "*")])
    assert rules_grant(rules, "billing.tasks.charge", "billing")
    assert not rules_grant(rules, "billing.tasks.charge", "chrono")  # the queue is not granted
    assert rules_grant(rules, "reports.daily", "anything")
    assert not rules_grant(rules, "reports.weekly", "billing")
    assert not rules_grant(rules, "billing.tasks.charge", "")


def test_no_rule_grants_nothing_built_in_tasks_included():
    for task in ("chrono.echo", "chrono.demo.report", "celery.accumulate", "x"):
        assert not rules_grant((), task, "chrono")


def test_a_grant_of_everything_on_one_queue_is_that_queue_only():
    rules = compile_rules([("*", "tenant-b")])
    assert rules_grant(rules, "celery.accumulate", "tenant-b")
    assert not rules_grant(rules, "celery.accumulate", "tenant-b2")
