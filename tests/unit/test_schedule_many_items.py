"""``schedule_many``'s items as specs (``scheduler.bulk_schedule``): the common item, a
one-time job by ``delay`` without options, takes a short way (``_plain_spec``) that must
give what the general conversion gives, spec or errors, for every item."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import bulk_schedule, python_args, specs
from scheduler.errors import InvalidJob, SpecInvalid
from scheduler.specs import Limits

LIMITS = Limits(now_ms=1_800_000_000_000, default_queue="chrono", max_payload_bytes=300,
                run_at_grace_ms=60_000)

TEXT = st.sampled_from(["billing.send", "reports", "a" * 201, "bad name", "", "x\x00y", "ü"])
VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | TEXT
    | st.sampled_from([uuid.UUID(int=3), datetime(2030, 1, 1)]),
    lambda inner: (st.lists(inner, max_size=3) | st.lists(inner, max_size=2).map(tuple)
                   | st.dictionaries(TEXT, inner, max_size=3)
                   | st.dictionaries(st.integers(0, 3), inner, max_size=2)),
    max_leaves=8,
)
DELAY = st.one_of(st.integers(-5, 10**7), st.floats(), st.booleans(), st.none(),
                  st.sampled_from([10**400, 1e306, timedelta(seconds=5), "60", 1.0005]))
# Mostly plain items, each argument sometimes wrong, sometimes one the short way leaves alone.
ITEM = st.fixed_dictionaries(
    {"task_name": st.one_of(st.just("billing.send"), TEXT, VALUE), "delay": DELAY},
    optional={"name": st.one_of(TEXT, VALUE), "queue": st.one_of(st.just("reports"), TEXT),
              "args": st.one_of(st.lists(VALUE, max_size=3), VALUE),
              "kwargs": st.one_of(st.dictionaries(TEXT, VALUE, max_size=3), VALUE),
              "idempotency_key": st.one_of(TEXT, VALUE), "at": st.just(datetime(2030, 1, 1,
                                                                                  tzinfo=UTC)),
              "retries": st.just(3), "soft_timeout_ms": st.just(1_000)},
)


def general(item: dict) -> tuple[specs.JobSpec, str | None]:
    """_checked_item without its short way."""
    spec_item = bulk_schedule._spec_item(item)
    key = item.get("idempotency_key")
    if problem := specs.idempotency_key_problem(key):
        raise InvalidJob(specs.python_message("idempotency_key", problem),
                         field="idempotency_key")
    return specs.parse_job_spec(spec_item, LIMITS), key


def outcome(check, item):
    try:
        return check(item)
    except InvalidJob as exc:
        return ("invalid", exc.field, exc.message)
    except SpecInvalid as exc:
        return ("spec", specs.python_problems(exc))


@settings(max_examples=600, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(ITEM)
def test_an_item_gets_the_same_spec_or_errors_as_by_the_general_conversion(item):
    assert outcome(lambda i: bulk_schedule._checked_item(i, LIMITS), item) == outcome(
        general, item)


@pytest.mark.parametrize("item", [
    {"task_name": "bench.noop", "delay": 3_600.001, "args": [1], "queue": "bench"},
    {"task_name": "a", "delay": 0},
    {"task_name": "a", "delay": 5, "name": "nightly", "kwargs": {"to": ["x@example.com"]},
     "idempotency_key": "k-1"},
])
def test_plain_items_take_the_short_way_with_the_general_spec(item):
    assert bulk_schedule._plain_spec(item, LIMITS) is not None
    assert bulk_schedule._checked_item(item, LIMITS) == general(item)


@pytest.mark.parametrize("item", [
    {"task_name": "a", "delay": True},
    {"task_name": "a", "delay": math.nan},
    {"task_name": "a", "delay": timedelta(seconds=5)},
    {"task_name": "a", "delay": 1, "args": (1, 2)},
    {"task_name": "a", "delay": 1, "kwargs": {"when": datetime(2030, 1, 1)}},
    {"task_name": "a", "delay": 1, "args": [uuid.UUID(int=1)]},
])
def test_items_the_short_way_cannot_vouch_for_take_the_general_one(item):
    assert bulk_schedule._plain_spec(item, LIMITS) is None


def test_a_plain_item_never_takes_the_standard_librarys_json_round_trip(monkeypatch):
    """That round trip was nine tenths of schedule_many's Python time per plain job."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("the standard library's round trip was taken")

    monkeypatch.setattr(python_args.json, "dumps", refuse)
    spec, key = bulk_schedule._checked_item(
        {"task_name": "a", "delay": 60, "args": [1, {"b": [2.5]}], "kwargs": {"c": None}},
        LIMITS)
    assert (spec.args, spec.kwargs, spec.fire_at_ms, key) == (
        [1, {"b": [2.5]}], {"c": None}, LIMITS.now_ms + 60_000, None)


def test_a_delay_beyond_a_floats_range_is_refused_by_name():
    """Both raised OverflowError: math.isfinite of the int, round() of the float's ms."""
    with pytest.raises(SpecInvalid) as refused:
        bulk_schedule._checked_item({"task_name": "a", "delay": 10**400}, LIMITS)
    [(argument, message)] = specs.python_problems(refused.value)
    assert argument == "delay" and "100 years" in message
    with pytest.raises(InvalidJob) as refused:
        bulk_schedule._checked_item({"task_name": "a", "delay": 1e306}, LIMITS)
    assert refused.value.field == "delay" and "100 years" in refused.value.message
