"""The Python API's arguments as a job spec (``scheduler.python_args``): ``args`` and ``kwargs``
become the JSON values the jobs table holds, by orjson's round trip when it can vouch for the
value and by the standard library's otherwise, with the same result either way."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import uuid
from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import python_args
from scheduler.errors import InvalidJob


class Colour(enum.Enum):
    RED = 1


class Size(enum.IntEnum):
    LARGE = 3


class Unit(enum.StrEnum):
    MS = "ms"


class Ratio(float):
    pass


class Tags(list):
    pass


@dataclasses.dataclass
class Point:
    x: int = 1


# Everything a caller may put in a payload: JSON's own types, and what orjson writes that the
# standard library refuses (a UUID, an Enum member, a datetime, a dataclass, NaN), converts
# (a tuple, an int key, an IntEnum, subclasses) or handles beyond orjson (integers past 64 bits,
# a lone surrogate).
EXOTIC = st.sampled_from([
    uuid.UUID(int=7), Colour.RED, Size.LARGE, Unit.MS, Ratio(1.5), math.nan, math.inf, -math.inf,
    datetime.datetime(2030, 1, 1), datetime.date(2030, 1, 1), datetime.time(9), Point(),
    decimal.Decimal("1.5"), b"bytes", {1, 2}, frozenset(), 2**64, 10**30, -(2**63) - 1,
    "lone \ud800 surrogate",  # not UTF-8: orjson refuses it, json writes it escaped
])
LEAF = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats()
        | st.text(max_size=8) | EXOTIC)
KEY = st.text(max_size=4) | st.integers(-3, 3) | st.booleans() | st.none() | st.floats(0, 2)
VALUE = st.recursive(
    LEAF,
    lambda inner: (st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
                   | st.lists(inner, max_size=3).map(Tags)
                   | st.dictionaries(st.text(max_size=4), inner, max_size=4)
                   | st.dictionaries(KEY, inner, max_size=3)
                   | st.dictionaries(st.text(max_size=3), inner, max_size=3).map(OrderedDict)),
    max_leaves=10,
)


def typed(value: object) -> object:
    """``value`` with the type of every node next to it (``1 == 1.0 == True`` otherwise)."""
    if isinstance(value, dict):
        return ("dict", [(typed(key), typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    return (type(value).__name__, repr(value))


def reference(args: object, kwargs: object) -> object:
    """What payload() gave before its fast way: the standard library's round trip."""
    values = {}
    for name, value, kind in (("args", args or (), list), ("kwargs", kwargs or {}, dict)):
        try:
            values[name] = json.loads(json.dumps(kind(value), allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            return ("refused", name)
    return typed(values)


def outcome(args: object, kwargs: object) -> object:
    try:
        return typed(python_args.payload(args, kwargs))
    except InvalidJob as exc:
        return ("refused", exc.field)


@settings(max_examples=600, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALUE, max_size=4), st.dictionaries(st.text(max_size=4), VALUE, max_size=3))
def test_a_payload_is_converted_or_refused_as_by_the_standard_library(args, kwargs):
    assert outcome(args, kwargs) == reference(args, kwargs)


@pytest.mark.parametrize("value", [
    [uuid.UUID(int=1)], [Colour.RED], [math.nan], [math.inf], [(1, 2)], [Point()],
    [datetime.datetime(2030, 1, 1)], [Ratio(0.5)], [Tags([1])], [2**64], {"a": {1: 2}},
])
def test_values_orjson_cannot_vouch_for_take_the_standard_librarys_way(value):
    assert python_args.plain_json_copy(value) is None


@pytest.mark.parametrize("value", [
    [], {}, [1, "two", 3.5, None, True, [{"k": [False]}]], {"n": 2**63 - 1, "s": "ünï\x00"},
    [Size.LARGE, Unit.MS],  # json writes them as their values too
])
def test_plain_values_are_copied_by_orjson(value):
    copied = python_args.plain_json_copy(value)
    assert copied == json.loads(json.dumps(value)) and copied is not value


def test_a_plain_payload_never_takes_the_standard_librarys_round_trip(monkeypatch):
    """The round trip cost ~13 µs a job, nine tenths of schedule_many's Python time."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("the standard library's round trip was taken")

    monkeypatch.setattr(python_args.json, "dumps", refuse)
    nested = {"to": ["a@example.com"], "n": 3, "opts": {"urgent": True, "ratio": 0.5}}
    assert python_args.payload([1, "x"], nested) == {"args": [1, "x"], "kwargs": nested}


def test_the_copy_shares_nothing_with_the_callers_payload():
    kwargs = {"to": ["a@example.com"]}
    converted = python_args.payload((), kwargs)["kwargs"]
    converted["to"].append("b@example.com")
    assert kwargs == {"to": ["a@example.com"]}


def test_a_delay_too_large_for_a_float_is_refused_by_name_not_overflowed():
    """Both raised OverflowError: math.isfinite of the int, round() of the float's ms."""
    assert python_args.when(10**400, None) == {"delay_ms": 10**403}  # the rules refuse it
    for seconds in (1e306, math.inf):
        with pytest.raises(InvalidJob) as refused:
            python_args.when(seconds, None)
        assert refused.value.field == "delay"
