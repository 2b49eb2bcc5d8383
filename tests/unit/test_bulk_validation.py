"""The bulk path's fast check of plain items (``specs._plain_spec``) against every rule
(``specs.checked_spec``): it may pass an item on to the rules, never judge it otherwise."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import specs
from scheduler.errors import SpecInvalid
from scheduler.specs import Limits, checked_spec, parse_job_spec

LIMITS = Limits(now_ms=1_800_000_000_000, default_queue="chrono", max_payload_bytes=300,
                run_at_grace_ms=60_000)

TEXT = st.one_of(
    st.sampled_from(["billing.send", "reports", "a" * 200, "a" * 201, "bad name", "", "x\x00y",
                     "q:1-2_3.4", "ünïcode", "tab\there"]),
    st.text(max_size=12),
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.sampled_from([2**53, 2**63, -(2**63) - 1, 2**64, 10**30])
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
# Cron expressions with digits of other scripts (str.isdigit() accepts them), Unicode spaces
# and control characters, next to valid ones.
CRON = st.one_of(
    st.sampled_from(["*/5 * * * *", "0 0 * * 5", "@daily", "² * * * *", "٣ * * * *",
                     "0\u2003* * * *", "0 0 1-³ * *", "*/٥ * * * *", "0\t* * * *"]),
    st.lists(st.sampled_from(["*", "0", "5", "1-3", "*/2", "²", "٣", "jan", "ｊan", ""]),
             min_size=4, max_size=7).map(" ".join),
)
FIELD_VALUE = st.one_of(
    TEXT, JSON_VALUE, CRON, st.integers(-5, specs.MAX_AHEAD_MS + 5),
    st.sampled_from([0, specs.MAX_AHEAD_MS, specs.MAX_AHEAD_MS + 1, True, 1.0]),
)
KEYS = st.sampled_from(["job_type", "name", "queue", "args", "kwargs", "delay_ms", "run_at",
                        "timezone", "max_retries", "jitter_ms", "job-type", "cron_expression"])
# Mostly plain items, each field sometimes wrong, sometimes with a field the fast path leaves
# to the rules; and anything at all.
DELAY = st.one_of(st.integers(0, 10**9), FIELD_VALUE)
NEAR_PLAIN = st.fixed_dictionaries(
    {"job_type": st.one_of(st.sampled_from(["a", "billing.tasks.send"]), TEXT), "delay_ms": DELAY},
    optional={"name": TEXT, "queue": st.one_of(st.just("reports"), TEXT),
              "args": st.one_of(st.lists(JSON_VALUE, max_size=4), JSON_VALUE),
              "kwargs": st.one_of(st.dictionaries(TEXT, JSON_VALUE, max_size=4), JSON_VALUE),
              "run_at": FIELD_VALUE, "max_retries": FIELD_VALUE},
)
PLAIN = st.fixed_dictionaries(
    {"job_type": st.sampled_from(["a", "billing.tasks.send", "x" * 200, "x" * 201, "1a"]),
     "delay_ms": st.integers(0, specs.MAX_AHEAD_MS + 1)},
    optional={"name": TEXT, "queue": st.sampled_from(["reports", "a:b", "a b", "q" * 201]),
              "args": st.lists(JSON_VALUE, max_size=4),
              "kwargs": st.dictionaries(TEXT, JSON_VALUE, max_size=4)},
)
ITEMS = st.one_of(PLAIN, NEAR_PLAIN, st.dictionaries(KEYS, FIELD_VALUE, max_size=7), JSON_VALUE)


def outcome(check, item):
    try:
        return check(item, LIMITS)
    except SpecInvalid as exc:
        return exc.errors


@settings(max_examples=800, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(ITEMS)
def test_an_item_gets_the_same_spec_or_errors_as_by_every_rule(item):
    assert outcome(parse_job_spec, item) == outcome(checked_spec, item)


@pytest.mark.parametrize("item", [
    {"job_type": "bench.noop", "delay_ms": 3_600_000, "args": [1, 2], "queue": "bench-ingest"},
    {"job_type": "a", "delay_ms": 0},
    {"job_type": "a", "delay_ms": 5, "name": "nightly ☾", "kwargs": {"k": "v"}},
])
def test_plain_items_take_the_fast_path_with_the_same_spec(item):
    spec = specs._plain_spec(item, LIMITS)
    assert spec is not None
    assert spec == checked_spec(item, LIMITS)


@pytest.mark.parametrize("item", [
    {"job_type": "a", "delay_ms": True},
    {"job_type": "a", "delay_ms": -1},
    {"job_type": "a b", "delay_ms": 1},
    {"job_type": "a", "delay_ms": 1, "args": ["\x00"]},
    {"job_type": "a", "delay_ms": 1, "args": ["x" * 300]},
    {"job_type": "a", "delay_ms": 1, "name": "n" * 201},
    {"job_type": "a", "run_at": "2030-01-01T00:00:00Z"},
    {"job_type": "a", "delay_ms": 1, "max_retries": 2},
])
def test_items_the_fast_path_cannot_vouch_for_go_through_every_rule(item):
    assert specs._plain_spec(item, LIMITS) is None
