"""The job spec validator's pure parts: the policies' own bounds, the Python API's wording of an
error, the vocabularies it keeps in step with the models. (Every rule through every way in:
tests/integration/test_one_way_in.py.)"""

from __future__ import annotations

import pytest

from scheduler import specs
from scheduler.errors import InvalidCronExpression, InvalidJob, PayloadTooLarge, SpecInvalid
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.models import MisfirePolicyChoice, OverlapPolicy
from scheduler.retry import RetryPolicy

LIMITS = specs.Limits(now_ms=1_800_000_000_000, default_queue="chrono", max_payload_bytes=300,
                      run_at_grace_ms=5_000)


def test_the_validator_knows_the_policies_the_models_store():
    assert specs.OVERLAP_POLICIES == tuple(OverlapPolicy.values)
    assert specs.MISFIRE_POLICIES == tuple(MisfirePolicyChoice.values)


@pytest.mark.parametrize(("changes", "problems"), [
    ({}, {}),
    ({"max_attempts": RetryPolicy.MAX_ATTEMPTS}, {}),
    ({"max_attempts": RetryPolicy.MAX_ATTEMPTS + 1},
     {"max_attempts": "Is 102; use a whole number from 1 to 101."}),
    ({"max_attempts": True},
     {"max_attempts": "Must be a whole number from 1 to 101, got a boolean."}),
    ({"max_delay_ms": RetryPolicy.MAX_DELAY_MS + 1},
     {"max_delay_ms": "Is 86400001; use a whole number of milliseconds from 0 to 86400000."}),
    ({"multiplier": float("inf")}, {"multiplier": (
        "Is inf; use a number from 1 (the same delay every time) to 100, by which each delay "
        "grows.")}),
    ({"non_retryable": ("ValueError",) * 50}, {}),
    ({"non_retryable": ["E"] * 51}, {"non_retryable": (
        "Holds 51 names; use at most 50 (a common base class covers its subclasses only by its "
        "own name, so list the ones raised).")}),
    ({"non_retryable": ["ok.Name", "E" * 201]}, {"non_retryable": (
        f"Item 1 ({'E' * 64!r}) is not an exception name; use exception class names such as "
        "'ValueError' or 'billing.errors.CardDeclined'.")}),
    ({"initial_delay_ms": 400_000}, {"initial_delay_ms": (
        "Is 400000, above max_delay_ms (300000), so every delay would be max_delay_ms; lower "
        "initial_delay_ms or raise max_delay_ms.")}),
])
def test_a_retry_policy_is_held_to_its_bounds(changes, problems):
    assert RetryPolicy.problems(RetryPolicy().to_json() | changes) == problems


def test_the_bounds_of_fields_not_given_are_not_checked_their_delays_together_are():
    stored = RetryPolicy(max_attempts=500, max_delay_ms=2 * 86_400_000).to_json()
    assert RetryPolicy.problems(stored | {"multiplier": 3}, given={"multiplier"}) == {}
    assert "initial_delay_ms" in RetryPolicy.problems(
        stored | {"initial_delay_ms": 3 * 86_400_000, "max_delay_ms": 1}, given={"multiplier"})


def test_a_policy_stored_beyond_the_bounds_still_reads_back():
    # Rows written before the bounds held the Python API (or by hand) must not stop the beat,
    # the worker or the reaper reading them: building a policy checks only its arithmetic.
    policy = RetryPolicy.from_json({"max_attempts": 10_000, "max_delay_ms": 7 * 86_400_000,
                                    "multiplier": 1_000.0, "non_retryable": ["not a name"]})
    assert policy.max_attempts == 10_000 and RetryPolicy.problems(policy.to_json())
    assert MisfireRule(MisfirePolicy.FIRE_ALL, 5_000).fire_all_limit == 5_000


def test_a_misfire_rule_is_held_to_its_bounds_and_gives_its_limit_with_fire_all_only():
    assert MisfireRule.problems({"policy": "fire_all", "fire_all_limit": 1_000}) == {}
    assert MisfireRule.problems({"fire_all_limit": 1_001}) == {
        "fire_all_limit": "Is 1001; use a whole number from 1 to 1000."}
    assert MisfireRule.problems({"policy": "late"}) == {
        "policy": "'late' is not a misfire policy; use one of fire_once, fire_all, skip."}
    assert MisfireRule(MisfirePolicy.FIRE_ALL, 3).to_fields() == {
        "misfire_policy": "fire_all", "misfire_fire_all_limit": 3}
    assert MisfireRule(MisfirePolicy.SKIP, 3).to_fields() == {"misfire_policy": "skip"}


@pytest.mark.parametrize(("errors", "field", "message"), [
    ({"name": ["Contains a control character (U+0000, NUL) at position 1; remove it."]}, "name",
     "name contains a control character (U+0000, NUL) at position 1; remove it."),
    ({"job_type": ["'a b' is not valid here; use a Celery task name."]}, "task_name",
     "task_name: 'a b' is not valid here; use a Celery task name."),
    ({"delay_ms": ["Is negative (-5); use 0 or more milliseconds from now."]}, "delay",
     "delay, in milliseconds, is negative (-5); use 0 or more milliseconds from now."),
    ({"retry_policy.multiplier": ["Is 0.5; use a number."]}, "retry",
     "multiplier is 0.5; use a number."),
    ({"misfire_fire_all_limit": ["Is 0; use a whole number from 1 to 1000."]}, "misfire",
     "fire_all_limit is 0; use a whole number from 1 to 1000."),
    ({"jitter_ms": ["jitter_ms applies to cron jobs only; leave it out."]}, "jitter_ms",
     "jitter_ms applies to cron jobs only; leave it out."),
    ({"non_field_errors": ["Nothing to change."]}, None, "Nothing to change."),
])
def test_the_python_api_names_its_own_argument_and_words_the_message_after_it(errors, field,
                                                                              message):
    error = specs.python_error(SpecInvalid(errors))
    assert type(error) is InvalidJob
    assert (error.field, error.message) == (field, message)


def test_the_python_api_raises_a_schedule_error_as_it_was_and_the_payload_limit_as_its_own():
    with pytest.raises(SpecInvalid) as refused:
        specs.checked_spec({"job_type": "a", "cron_expression": "61 * * * *"}, LIMITS)
    error = specs.python_error(refused.value)
    assert type(error) is InvalidCronExpression and error.field == "minute"
    with pytest.raises(SpecInvalid) as refused:
        specs.checked_spec({"job_type": "a", "delay_ms": 1, "args": ["x" * 400]}, LIMITS)
    error = specs.python_error(refused.value)
    assert type(error) is PayloadTooLarge and error.field == "args"
    assert error.message.startswith("args and kwargs are 406 bytes as JSON; the limit is 300")


def test_a_declaration_is_checked_without_its_task_name_as_a_cron_jobs_options():
    specs.check_declaration({"queue": "billing", "overlap_policy": "allow"}, LIMITS)
    with pytest.raises(SpecInvalid) as refused:
        specs.check_declaration({"queue": "a b", "overlap_policy": "never",
                                 "retry_policy": {"multiplier": 0}}, LIMITS)
    assert set(refused.value.errors) == {"queue", "overlap_policy", "retry_policy.multiplier"}


@pytest.mark.parametrize(("key", "problem"), [
    (None, None), ("k", None), ("k" * 200, None), ("beat:billing:close day", None),
    ("", "Is 0 characters long; use 1 to 200."),
    ("k" * 201, "Is 201 characters long; use 1 to 200."),
    ("k\x00", "Contains a control character (U+0000, NUL) at position 1; remove it."),
    (7, "Must be a string, got a number."),
])
def test_an_idempotency_key_is_1_to_200_characters_without_a_control_character(key, problem):
    assert specs.idempotency_key_problem(key) == problem
