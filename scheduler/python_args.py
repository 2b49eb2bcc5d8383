"""The Python API's arguments as a job spec: conversion, not rules.

A timedelta or seconds become milliseconds, tuples lists, policies their fields; the rules are
:mod:`scheduler.specs`' (the one validator of every way in). :mod:`scheduler.api` (one job) and
:mod:`scheduler.bulk_schedule` (many) both build their specs here, so they accept and refuse the
same arguments.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from datetime import datetime, timedelta

import orjson

from scheduler import specs
from scheduler.errors import InvalidJob
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.retry import RetryPolicy


def payload(args: object, kwargs: object) -> dict[str, object]:
    """``args`` and ``kwargs`` as the JSON values the jobs table will hold (tuples become lists,
    keys strings). Raises InvalidJob naming ``args`` or ``kwargs`` when they are not JSON."""
    args = () if args is None else args
    if not isinstance(args, list | tuple):
        raise InvalidJob(f"args must be a list or a tuple, got {type(args).__name__}",
                         field="args")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise InvalidJob(f"kwargs must be a dict, got {type(kwargs).__name__}", field="kwargs")
    values = {}
    for name, value, kind in (("args", args, list), ("kwargs", kwargs, dict)):
        value = kind(value)
        values[name] = plain_json_copy(value)
        if values[name] is None:
            try:
                values[name] = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError, RecursionError) as exc:
                raise InvalidJob(f"{name} must be JSON-serialisable: {exc}",
                                 field=name) from None
    return values


# orjson writes datetimes, dataclasses and subclasses of str, int, dict and list itself unless
# told not to; with these it refuses them, as the standard library's json does (or converts
# them: an IntEnum becomes its int), and the conversion takes the slow way.
_PASSTHROUGH = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
                | orjson.OPT_PASSTHROUGH_SUBCLASS)


def plain_json_copy(value: list | dict) -> list | dict | None:
    """A copy of ``value`` as JSON gives it back, when that copy equals it; None otherwise.

    The standard library's round trip in :func:`payload` costs ~13 µs for ``[1]`` and ``{}``
    (``allow_nan=False`` builds an encoder per call), nine tenths of ``schedule_many``'s Python
    time per plain job; orjson's costs a tenth of that. orjson alone cannot be trusted to refuse
    what json refuses (it writes a UUID and an Enum member as their values, NaN and infinity
    as null, a tuple as a list), but then its copy differs from the value (a str, None, a
    list where there was a UUID, NaN, a tuple): a copy equal to the value means the value
    held only JSON's own types, for which the standard library's round trip gives the same
    copy. Anything else (and what orjson refuses: non-string keys, integers beyond 64 bits,
    nesting deeper than 254) returns None and takes the standard library's way, which words
    the error."""
    if not value:  # the common empty kwargs (or args) are their own copy
        return type(value)() if type(value) in (list, dict) else None
    try:
        copied = orjson.loads(orjson.dumps(value, option=_PASSTHROUGH))
    except orjson.JSONEncodeError:
        return None
    return copied if copied == value else None


def when(delay: timedelta | float | None, at: datetime | None) -> dict[str, object]:
    """``delay`` (seconds or a timedelta) as ``delay_ms``, or ``at`` as ``run_at``."""
    if (delay is None) == (at is None):
        raise InvalidJob("give exactly one of delay= or at=", field="delay")
    if at is not None:
        if not isinstance(at, datetime):
            raise InvalidJob(f"at= takes an aware datetime, got {type(at).__name__}",
                             field="at")
        return {"run_at": at}
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidJob(f"delay= takes seconds or a timedelta, got {type(delay).__name__}",
                         field="delay")
    # An int is always finite (and one beyond a float's range would overflow isfinite); the
    # spec's rules refuse the milliseconds of one beyond a hundred years.
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise InvalidJob(f"delay= is {seconds}; give a number of seconds", field="delay")
    milliseconds = seconds * 1000
    if isinstance(milliseconds, float) and not math.isfinite(milliseconds):
        raise InvalidJob(f"delay= is {seconds} seconds, more than 100 years; give a smaller "
                         "delay", field="delay")
    return {"delay_ms": round(milliseconds)}


def execution_options(
    max_retries: int | None,
    retry: RetryPolicy | None,
    soft_timeout_ms: int | None,
    hard_timeout_ms: int | None,
    misfire: MisfireRule | MisfirePolicy | str | None,
    *,
    stacklevel: int = 3,
) -> dict[str, object]:
    """The execution options given (None: not given) as the spec's fields."""
    item: dict[str, object] = {}
    if max_retries is not None:
        warnings.warn("max_retries= is deprecated: pass retry=RetryPolicy(max_attempts="
                      "max_retries + 1)", DeprecationWarning, stacklevel=stacklevel)
        item["max_retries"] = max_retries
    if retry is not None:
        item["retry_policy"] = specs.retry_fields(retry)
    for key, value in (("soft_timeout_ms", soft_timeout_ms),
                       ("hard_timeout_ms", hard_timeout_ms)):
        if value is not None:
            item[key] = value
    if misfire is not None:
        item |= specs.misfire_fields(misfire)
    return item


def interval_ms_of(every: object) -> int:
    """``every=`` (a timedelta or seconds) as whole milliseconds; InvalidJob naming ``every``."""
    seconds = every.total_seconds() if isinstance(every, timedelta) else every
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or \
            not math.isfinite(seconds):
        raise InvalidJob(f"every= takes seconds or a timedelta, got {every!r}", field="every")
    return round(seconds * 1000)


def calendars(names: object, *, given: bool = False) -> dict[str, object]:
    """``calendars=`` (names of the tenant's exclusion calendars; a list, a tuple or another
    iterable of them, not one string) as the spec's ``calendars``: left out when empty unless
    ``given`` (a change to no calendars). The names' rules are :mod:`scheduler.specs`'."""
    if isinstance(names, str):
        raise InvalidJob(f"calendars= takes a list of calendar names, got the string {names!r};"
                         f" write [{names!r}]", field="calendars")
    if names is None:
        names = ()
    try:
        listed = list(names)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidJob(f"calendars= takes a list of calendar names, got "
                         f"{type(names).__name__}", field="calendars") from None
    return {"calendars": listed} if listed or given else {}
