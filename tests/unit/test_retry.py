"""Retry policies and backoff: pure functions, no services."""

from __future__ import annotations

import random

import pytest

from scheduler.retry import RETRY_TIERS_MS, RetryPolicy, retry_tier_ms

POLICY = RetryPolicy(max_attempts=5, initial_delay_ms=1_000, multiplier=3, max_delay_ms=20_000)


def test_delay_bound_grows_exponentially_up_to_the_cap():
    assert [POLICY.delay_bound_ms(a) for a in range(2, 7)] == [1_000, 3_000, 9_000, 20_000,
                                                               20_000]


def test_full_jitter_delays_stay_within_zero_and_the_bound_and_spread_out():
    rng = random.Random(7)
    for attempt in range(2, 6):
        delays = [POLICY.delay_ms(attempt, rng) for _ in range(2_000)]
        bound = POLICY.delay_bound_ms(attempt)
        assert 0 <= min(delays) and max(delays) <= bound
        assert max(delays) > 0.9 * bound and min(delays) < 0.1 * bound


def test_retries_stop_after_max_attempts():
    assert POLICY.should_retry(failed_attempt=4, error_type="builtins.RuntimeError")
    assert not POLICY.should_retry(failed_attempt=5, error_type="builtins.RuntimeError")


def test_non_retryable_errors_are_not_retried_by_full_or_short_name():
    policy = RetryPolicy(max_attempts=5, non_retryable=("ValueError", "billing.errors.Fatal"))
    assert not policy.should_retry(failed_attempt=1, error_type="builtins.ValueError")
    assert not policy.should_retry(failed_attempt=1, error_type="billing.errors.Fatal")
    assert policy.should_retry(failed_attempt=1, error_type="builtins.KeyError")


def test_the_default_policy_never_retries():
    assert not RetryPolicy().should_retry(failed_attempt=1, error_type="builtins.Exception")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"max_attempts": 0}, "max_attempts"), ({"initial_delay_ms": -1}, "negative"),
     ({"multiplier": 0.5}, "multiplier")],
)
def test_invalid_policies_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


def test_policy_round_trips_through_json():
    policy = RetryPolicy(max_attempts=3, non_retryable=("KeyError",))
    assert RetryPolicy.from_json(policy.to_json()) == policy
    assert RetryPolicy.from_json(None) == RetryPolicy()


def test_a_delay_is_rounded_down_to_a_tier_never_up():
    assert retry_tier_ms(0) == 0
    assert retry_tier_ms(999) == 0
    assert retry_tier_ms(1_000) == 1_000
    assert retry_tier_ms(4_999) == 2_000
    assert retry_tier_ms(60_000) == 60_000
    assert retry_tier_ms(60_001) is None
    for delay in range(0, 60_001, 997):
        tier = retry_tier_ms(delay)
        assert tier <= delay and (tier == 0 or tier in RETRY_TIERS_MS)
