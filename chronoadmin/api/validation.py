"""The rules a job sent to the REST API must follow, as plain functions (no DRF, no ORM).

The single create (through :class:`~chronoadmin.api.serializers.JobCreateSerializer`) and the
bulk path (tens of thousands of items a second) share these functions, so an item gets the same
message whichever way it arrives. Every message says what to change.

A job's execution options (retries, timeouts, overlap, misfire, jitter) are checked by
:func:`parse_options` against a base: the defaults for a create, the job's current options for a
PATCH. ``max_retries`` and ``retry_policy.max_attempts`` are one setting in two spellings
(``max_attempts`` counts the first run, so it is ``max_retries + 1``): either may be given, both
must agree.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from chronoadmin.api.errors import NON_FIELD, api_field
from scheduler.clock import datetime_to_ms
from scheduler.cron import CronSchedule, parse_cron, validate_timezone
from scheduler.errors import InvalidSchedule
from scheduler.inputs import (
    CONTROL_CHARACTER,
    control_character_problem,
    encode_payload,
    plain_payload,
    printable,
)
from scheduler.misfire import MisfirePolicy, MisfireRule, jitter_room_ms
from scheduler.models import OverlapPolicy
from scheduler.retry import RetryPolicy, effective_policy

MAX_RETRIES = 100
MAX_TEXT_LENGTH = 200
# The furthest ahead a one-time job may be scheduled: beyond it a delay is surely a unit mistake.
MAX_AHEAD_MS = 100 * 366 * 86_400_000
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*\Z")
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:\-]+\Z")
# Execution options. Beyond these bounds a value is surely a unit mistake.
MAX_ATTEMPTS = MAX_RETRIES + 1
MAX_RETRY_DELAY_MS = 86_400_000  # a day
MAX_MULTIPLIER = 100
MAX_NON_RETRYABLE = 50
MAX_TIMEOUT_MS = 86_400_000  # a day
MAX_FIRE_ALL_LIMIT = 1_000
MAX_JITTER_MS = 7 * 86_400_000  # a week; it must also stay below the schedule's period
# Jitter must stay below the shortest gap between this many coming occurrences.
JITTER_OCCURRENCES_CHECKED = 10
EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
RETRY_POLICY_FIELDS = ("max_attempts", "initial_delay_ms", "multiplier", "max_delay_ms",
                       "non_retryable")
OVERLAP_POLICIES = tuple(policy.value for policy in OverlapPolicy)
MISFIRE_POLICIES = tuple(policy.value for policy in MisfirePolicy)
OPTION_FIELDS = (
    "retry_policy", "soft_timeout_ms", "hard_timeout_ms", "overlap_policy", "misfire_policy",
    "misfire_fire_all_limit", "jitter_ms",
)  # fmt: skip
CRON_ONLY_FIELDS = ("overlap_policy", "jitter_ms")

SCHEDULE_FIELDS = ("run_at", "delay_ms", "cron_expression")
CREATE_FIELDS = (
    "job_type", "name", "queue", "args", "kwargs", "max_retries",
    "run_at", "delay_ms", "cron_expression", "timezone", *OPTION_FIELDS,
)  # fmt: skip
UPDATE_FIELDS = ("run_at", "cron_expression", "timezone", "max_retries", *OPTION_FIELDS)
_CREATE_FIELD_SET = frozenset(CREATE_FIELDS)
_OPTION_FIELD_SET = frozenset(("max_retries", *OPTION_FIELDS))
# The fields of a bulk item that the fast path (_plain_spec) takes; any other goes the full way.
_PLAIN_FIELDS = frozenset(("job_type", "name", "queue", "args", "kwargs", "delay_ms"))

Errors = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """How each occurrence of a job runs, validated: what a job row stores in
    ``max_retries``, ``retry_policy``, the timeouts, the policies and ``jitter_ms``."""

    max_retries: int = 0
    # None: attempts from max_retries with the default backoff (the row stores {}).
    retry: RetryPolicy | None = None
    soft_timeout_ms: int | None = None
    hard_timeout_ms: int | None = None
    overlap_policy: str = OverlapPolicy.SKIP.value
    misfire_policy: str = MisfirePolicy.FIRE_ONCE.value
    misfire_fire_all_limit: int = MisfireRule().fire_all_limit
    jitter_ms: int = 0

    @property
    def effective_retry(self) -> RetryPolicy:
        """The policy the worker gets: ``retry``, or the default backoff with max_retries."""
        return self.retry or RetryPolicy(max_attempts=self.max_retries + 1)

    @property
    def retry_policy_json(self) -> str:
        """``retry_policy`` as the jobs table stores it."""
        return "{}" if self.retry is None else json.dumps(policy_fields(self.retry))

    @property
    def misfire_rule(self) -> MisfireRule:
        return MisfireRule(MisfirePolicy(self.misfire_policy), self.misfire_fire_all_limit)


DEFAULT_OPTIONS = ExecutionOptions()


def policy_fields(policy: RetryPolicy) -> dict[str, object]:
    """``policy.to_json()`` without dataclasses.asdict, which costs most of a bulk item."""
    return {"max_attempts": policy.max_attempts, "initial_delay_ms": policy.initial_delay_ms,
            "multiplier": policy.multiplier, "max_delay_ms": policy.max_delay_ms,
            "non_retryable": list(policy.non_retryable)}


@dataclass(slots=True)
class JobSpec:
    """A validated job, ready for :mod:`scheduler.api` or the bulk COPY."""

    job_type: str
    name: str
    queue: str
    args: list
    kwargs: dict
    args_json: str
    kwargs_json: str
    cron_expression: str | None
    timezone: str
    fire_at_ms: int  # of the first occurrence, before jitter (the job id is not known yet)
    options: ExecutionOptions = DEFAULT_OPTIONS

    @property
    def max_retries(self) -> int:
        return self.options.max_retries


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits a spec is checked against (from the config, read once per request)."""

    now_ms: int
    default_queue: str
    max_payload_bytes: int
    run_at_grace_ms: int


class SpecInvalid(Exception):
    """Raised when a job spec breaks a rule; ``errors`` maps each field to its messages and
    ``too_large`` says the payload limit was one of them (the API answers 413 for that)."""

    def __init__(self, errors: Errors, *, too_large: bool = False) -> None:
        super().__init__(errors)
        self.errors = errors
        self.too_large = too_large


def unknown_field_errors(item: dict, allowed: tuple[str, ...], *, prefix: str = "") -> Errors:
    """One error per key of ``item`` that is not in ``allowed``, with a suggestion; ``prefix``
    names the object holding them (``"retry_policy."``)."""
    errors: Errors = {}
    for key in item:
        if key in allowed:
            continue
        name = printable(str(key))
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        errors[f"{prefix}{name}"] = [
            f"Unknown field; {hint}the fields are: {', '.join(allowed)}."]
    return errors


def parse_job_spec(item: object, limits: Limits) -> JobSpec:
    """Validate one job of a create request; raises :class:`SpecInvalid` with every error."""
    return _plain_spec(item, limits) or checked_spec(item, limits)


def checked_spec(item: object, limits: Limits) -> JobSpec:
    """:func:`parse_job_spec` by every rule, one by one (the way every item that is not plain
    takes, and the one that words the errors)."""
    if not isinstance(item, dict):
        raise SpecInvalid({NON_FIELD: [f"A job is a JSON object, got {_json_type(item)}."]})
    errors = {} if item.keys() <= _CREATE_FIELD_SET else unknown_field_errors(item, CREATE_FIELDS)
    job_type = _text(item, "job_type", errors, required=True, pattern=TASK_NAME,
                     example="a Celery task name such as 'billing.tasks.send_invoice'")
    name = _text(item, "name", errors, default="")
    queue = _text(item, "queue", errors, default=limits.default_queue, pattern=QUEUE_NAME,
                  example="letters, digits and . _ : - such as 'reports'")
    args = _typed(item, "args", list, "a JSON array", errors, default=[])
    kwargs = _typed(item, "kwargs", dict, "a JSON object", errors, default={})
    args_json, kwargs_json, too_large = _payload(args, kwargs, limits, errors)
    schedule, timezone, fire_at_ms = _schedule(item, limits, errors)
    options = DEFAULT_OPTIONS
    if not _OPTION_FIELD_SET.isdisjoint(item.keys()):  # the bulk path's common case skips this
        kind = "cron" if "cron_expression" in item else "one-time"
        options = parse_options(item, DEFAULT_OPTIONS, errors, kind=kind, schedule=schedule,
                                now_ms=limits.now_ms)
    if errors:
        raise SpecInvalid(errors, too_large=too_large)
    return JobSpec(job_type, name, queue, args, kwargs, args_json, kwargs_json,
                   schedule.expression if schedule else None, timezone, fire_at_ms, options)


def _plain_spec(item: object, limits: Limits) -> JobSpec | None:
    """The spec of the common bulk item, a one-time job by ``delay_ms`` with no options, when
    every field of it is plainly valid; None for anything else, which the rules above then
    check and word. It accepts only what they accept, with the same result (a test holds
    them to that), at 60% of their cost (13 ms instead of 22 for 5,000 items)."""
    if type(item) is not dict or not item.keys() <= _PLAIN_FIELDS:
        return None
    get = item.get
    job_type, name, queue = get("job_type"), get("name", ""), get("queue", limits.default_queue)
    delay_ms, args, kwargs = get("delay_ms"), get("args", []), get("kwargs", {})
    if not (type(job_type) is str and type(name) is str and type(queue) is str
            and type(delay_ms) is int and 0 <= delay_ms <= MAX_AHEAD_MS
            and type(args) is list and type(kwargs) is dict
            and _plain_text(job_type, TASK_NAME) and _plain_text(queue, QUEUE_NAME)
            and len(name) <= MAX_TEXT_LENGTH
            # isprintable() is False for every control character (and a few others): it spares
            # most names the search.
            and (name.isprintable() or CONTROL_CHARACTER.search(name) is None)):
        return None
    payload = plain_payload(args, kwargs, max_bytes=limits.max_payload_bytes)
    if payload is None:
        return None
    return JobSpec(job_type, name, queue, args, kwargs, payload[0].decode(), payload[1].decode(),
                   None, "UTC", limits.now_ms + delay_ms)


@lru_cache(maxsize=1024)  # the task names and queues of a bulk request repeat
def _plain_text(value: str, pattern: re.Pattern) -> bool:
    """``value`` passes :func:`_text` (length, no control character, ``pattern``)."""
    return (len(value) <= MAX_TEXT_LENGTH and CONTROL_CHARACTER.search(value) is None
            and bool(pattern.match(value)))


def parse_update(item: object, limits: Limits) -> dict[str, object]:
    """Validate a PATCH on its own: ``{"run_at": fire ms}`` and/or ``cron_expression`` and
    ``timezone`` (checked by :func:`scheduler.api.reschedule`), and the execution options as
    sent (checked against the job by :func:`parse_options`). Raises SpecInvalid."""
    if not isinstance(item, dict):
        raise SpecInvalid({NON_FIELD: [f"Send a JSON object, got {_json_type(item)}."]})
    errors = unknown_field_errors(item, UPDATE_FIELDS)
    if not errors and not item:
        errors[NON_FIELD] = [f"Nothing to change: give one of {', '.join(UPDATE_FIELDS)}."]
    changes: dict[str, object] = {}
    if "run_at" in item:
        fire_at_ms = _run_at(item["run_at"], limits, errors)
        if fire_at_ms is not None:
            changes["run_at"] = fire_at_ms
    for key in ("cron_expression", "timezone"):
        value = _text(item, key, errors, default=None)
        if value is not None:
            changes[key] = value
    changes |= {key: item[key] for key in _OPTION_FIELD_SET if key in item}
    if errors:
        raise SpecInvalid(errors)
    return changes


def parse_options(
    item: dict, base: ExecutionOptions, errors: Errors, *, kind: str,
    schedule: CronSchedule | None, now_ms: int,
) -> ExecutionOptions:
    """The execution options of ``item`` laid over ``base`` (the defaults for a create, the
    job's options for a PATCH), with their messages in ``errors``. ``kind`` is ``"cron"`` or
    ``"one-time"``; ``schedule`` (a cron job's, None when it is unknown or invalid) bounds the
    jitter. A ``retry_policy`` is merged key by key into base's."""
    max_retries, retry = _retries(item, base, errors)
    soft, hard = _timeouts(item, base, errors)
    if kind != "cron":
        for key in CRON_ONLY_FIELDS:
            if key in item:
                errors[key] = [f"{key} applies to cron jobs only (a one-time job has one "
                               "occurrence); leave it out."]
        item = {key: value for key, value in item.items() if key not in CRON_ONLY_FIELDS}
    overlap = _choice(item, "overlap_policy", OVERLAP_POLICIES, "an overlap policy", errors,
                      default=base.overlap_policy)
    misfire = _choice(item, "misfire_policy", MISFIRE_POLICIES, "a misfire policy", errors,
                      default=base.misfire_policy)
    fire_all_limit = _whole_number(item, "misfire_fire_all_limit", errors,
                                   default=base.misfire_fire_all_limit, low=1,
                                   high=MAX_FIRE_ALL_LIMIT)
    if "misfire_fire_all_limit" in item and misfire != MisfirePolicy.FIRE_ALL and \
            "misfire_policy" not in errors and "misfire_fire_all_limit" not in errors:
        errors["misfire_fire_all_limit"] = [
            f"Applies to misfire_policy 'fire_all' only (this job's is '{misfire}'); add "
            "\"misfire_policy\": \"fire_all\" or leave misfire_fire_all_limit out."]
    jitter_ms = _whole_number(item, "jitter_ms", errors, default=base.jitter_ms,
                              high=MAX_JITTER_MS, unit="milliseconds")
    if jitter_ms and schedule is not None and "jitter_ms" not in errors:
        _check_jitter(jitter_ms, schedule, now_ms, errors)
    return ExecutionOptions(max_retries, retry, soft, hard, overlap, misfire, fire_all_limit,
                            jitter_ms)


def options_of(job: object) -> ExecutionOptions:
    """What a job row holds, as options (the base of a PATCH)."""
    retry = effective_policy(job.retry_policy, job.max_retries) if job.retry_policy else None
    return ExecutionOptions(
        max_retries=retry.max_attempts - 1 if retry else job.max_retries, retry=retry,
        soft_timeout_ms=job.soft_timeout_ms, hard_timeout_ms=job.hard_timeout_ms,
        overlap_policy=job.overlap_policy, misfire_policy=job.misfire_policy,
        misfire_fire_all_limit=job.misfire_fire_all_limit, jitter_ms=job.jitter_ms,
    )


# Field rules. Each records its messages in ``errors`` and returns the value (or a default).


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _text(item: dict, key: str, errors: Errors, *, default: str | None = None,
          required: bool = False, pattern: re.Pattern | None = None,
          example: str = "") -> str | None:
    if key not in item:
        if required:
            errors[key] = [f"This field is required: {example}." if example else
                           "This field is required."]
        return default
    value = item[key]
    if not isinstance(value, str):
        errors[key] = [f"Must be a string, got {_json_type(value)}."]
        return default
    if len(value) > MAX_TEXT_LENGTH:
        errors[key] = [f"Is {len(value)} characters long; use at most {MAX_TEXT_LENGTH}."]
    elif problem := control_character_problem(value):
        errors[key] = [problem]
    elif pattern is not None and not pattern.match(value):
        errors[key] = [f"'{value}' is not valid here; use {example}." if value else
                       f"Must not be empty; use {example}."]
    return value


def _whole_number(item: dict, key: str, errors: Errors, *, default: int, high: int,
                  low: int = 0, unit: str = "", field: str | None = None) -> int:
    value = item.get(key, default)
    if type(value) is int and low <= value <= high:  # the common case, before any message
        return value
    what = f"a whole number{f' of {unit}' if unit else ''} from {low} to {high}"
    if isinstance(value, bool) or not isinstance(value, int):
        errors[field or key] = [f"Must be {what}, got {_json_type(value)}."]
        return default
    errors[field or key] = [f"Is negative ({value}); use {what}." if value < 0 <= low else
                            f"Is {value}; use {what}."]
    return value


def _typed(item: dict, key: str, kind: type, kind_name: str, errors: Errors, *, default):
    value = item.get(key, default)
    if not isinstance(value, kind):
        errors[key] = [f"Must be {kind_name}, got {_json_type(value)}."]
        return default
    return value


def _payload(args: list, kwargs: dict, limits: Limits, errors: Errors) -> tuple[str, str, bool]:
    """The payload as JSON text (:func:`scheduler.inputs.encode_payload`, the measure of the
    Python API too), its problems added to ``errors``, and whether it is over the limit."""
    payload = encode_payload(args, kwargs, max_bytes=limits.max_payload_bytes)
    for key, messages in payload.errors.items():
        errors.setdefault(key, []).extend(messages)
    return payload.args_json.decode(), payload.kwargs_json.decode(), payload.too_large


def _schedule(
    item: dict, limits: Limits, errors: Errors
) -> tuple[CronSchedule | None, str, int]:
    """``(cron schedule or None, time zone, first fire ms)`` from exactly one schedule field."""
    given = [key for key in SCHEDULE_FIELDS if key in item]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        errors[NON_FIELD if not given else given[-1]] = [
            f"Give exactly one of run_at (ISO 8601 time with offset), delay_ms (milliseconds "
            f"from now) or cron_expression; got {what}."
        ]
        return None, "UTC", 0
    if "timezone" in item and given[0] != "cron_expression":
        errors["timezone"] = [
            "timezone applies to cron_expression only; write run_at with its UTC offset "
            "instead (e.g. 2030-01-01T09:00:00+01:00)."
        ]
    if given[0] == "run_at":
        return None, "UTC", _run_at(item["run_at"], limits, errors) or 0
    if given[0] == "delay_ms":
        return None, "UTC", _delay(item["delay_ms"], limits, errors)
    return _cron(item, limits, errors)


def _run_at(value: object, limits: Limits, errors: Errors) -> int | None:
    example = "an ISO 8601 time with a UTC offset such as 2030-01-01T09:00:00Z"
    if not isinstance(value, str):
        errors["run_at"] = [f"Must be {example}, got {_json_type(value)}."]
        return None
    # fromisoformat() reads "2030-01-01T09:00:00Z\x00" as a time: check first.
    if problem := control_character_problem(value):
        errors["run_at"] = [problem]
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        errors["run_at"] = [f"'{value[:64]}' is not a time; use {example}."]
        return None
    if when.tzinfo is None or when.utcoffset() is None:
        errors["run_at"] = [f"'{value[:64]}' has no UTC offset; use {example}."]
        return None
    fire_at_ms = datetime_to_ms(when)
    late_ms = limits.now_ms - fire_at_ms
    if late_ms > limits.run_at_grace_ms:
        errors["run_at"] = [
            f"Is {_duration(late_ms)} in the past (at most {limits.run_at_grace_ms} ms is "
            "allowed); give a future time, or delay_ms=0 to run now."
        ]
    elif -late_ms > MAX_AHEAD_MS:
        errors["run_at"] = ["Is more than 100 years ahead; give a nearer time."]
    return fire_at_ms


def _delay(value: object, limits: Limits, errors: Errors) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        errors["delay_ms"] = [
            f"Must be a whole number of milliseconds (0 or more), got {_json_type(value)}."
        ]
        return 0
    if value < 0:
        errors["delay_ms"] = [f"Is negative ({value}); use 0 or more milliseconds from now."]
    elif value > MAX_AHEAD_MS:
        errors["delay_ms"] = [f"Is more than 100 years ({MAX_AHEAD_MS} ms); give a smaller delay."]
    return limits.now_ms + value


def _cron(item: dict, limits: Limits, errors: Errors) -> tuple[CronSchedule | None, str, int]:
    expression = _text(item, "cron_expression", errors)
    timezone = _text(item, "timezone", errors, default="UTC")
    if "cron_expression" in errors or "timezone" in errors:
        return None, "UTC", 0
    try:
        validate_timezone(timezone)
        schedule = parse_cron(expression, timezone)
        return schedule, timezone, schedule.next_fire_ms(limits.now_ms)
    except InvalidSchedule as exc:
        errors[api_field(exc.field)] = [exc.message]
        return None, "UTC", 0


# Execution options.


def _retries(item: dict, base: ExecutionOptions, errors: Errors) -> tuple[int, RetryPolicy | None]:
    """``(max_retries, retry policy or None)``: the policy is None while neither this request
    nor the job ever gave one (max_retries then counts the attempts, default backoff)."""
    max_retries = _whole_number(item, "max_retries", errors, default=base.max_retries,
                                high=MAX_RETRIES)
    if "max_retries" in errors or ("max_retries" not in item and "retry_policy" not in item):
        return base.max_retries, base.retry
    if "retry_policy" not in item:
        if base.retry is None:
            return max_retries, None
        return max_retries, RetryPolicy(**(policy_fields(base.retry) | {
            "max_attempts": max_retries + 1}))
    given = item["retry_policy"]
    fields = _retry_policy(given, policy_fields(base.effective_retry) | {
        "max_attempts": max_retries + 1}, errors)
    if fields is None:
        return max_retries, base.retry
    if "max_retries" in item and "max_attempts" in given and \
            fields["max_attempts"] != max_retries + 1:
        errors["retry_policy.max_attempts"] = [
            f"Is {fields['max_attempts']}, which contradicts max_retries {max_retries}: "
            "max_attempts counts the first run, so it must be max_retries + 1 = "
            f"{max_retries + 1}. Give one of the two, or make them agree."]
        return max_retries, base.retry
    policy = RetryPolicy(**fields)
    return policy.max_attempts - 1, policy


def _retry_policy(value: object, base: dict, errors: Errors) -> dict | None:
    """``base`` (a policy's fields) with the keys of ``value`` checked and laid over it; None
    when one is wrong (its message is in ``errors``)."""
    if not isinstance(value, dict):
        errors["retry_policy"] = [
            f"Must be a JSON object with any of {', '.join(RETRY_POLICY_FIELDS)}, got "
            f"{_json_type(value)}; leave it out for the default policy."]
        return None
    found = unknown_field_errors(value, RETRY_POLICY_FIELDS, prefix="retry_policy.")
    fields = dict(base)
    fields["max_attempts"] = _whole_number(
        value, "max_attempts", found, default=base["max_attempts"], low=1, high=MAX_ATTEMPTS,
        field="retry_policy.max_attempts")
    for key in ("initial_delay_ms", "max_delay_ms"):
        fields[key] = _whole_number(value, key, found, default=base[key], high=MAX_RETRY_DELAY_MS,
                                    unit="milliseconds", field=f"retry_policy.{key}")
    fields["multiplier"] = _multiplier(value, base["multiplier"], found)
    fields["non_retryable"] = _exception_names(value, base["non_retryable"], found)
    if not found and fields["initial_delay_ms"] > fields["max_delay_ms"]:
        found["retry_policy.initial_delay_ms"] = [
            f"Is {fields['initial_delay_ms']}, above max_delay_ms ({fields['max_delay_ms']}), so "
            "every delay would be max_delay_ms; lower initial_delay_ms or raise max_delay_ms."]
    errors.update(found)
    return None if found else fields


def _multiplier(policy: dict, default: float, errors: Errors) -> float:
    if "multiplier" not in policy:
        return float(default)
    value = policy["multiplier"]
    what = (f"a number from 1 (the same delay every time) to {MAX_MULTIPLIER}, by which each "
            "delay grows")
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors["retry_policy.multiplier"] = [f"Must be {what}, got {_json_type(value)}."]
        return float(default)
    if not (math.isfinite(value) and 1 <= value <= MAX_MULTIPLIER):
        errors["retry_policy.multiplier"] = [f"Is {value}; use {what}."]
        return float(default)
    return float(value)


def _exception_names(policy: dict, default: list, errors: Errors) -> list[str]:
    if "non_retryable" not in policy:
        return list(default)
    value = policy["non_retryable"]
    example = "exception class names such as 'ValueError' or 'billing.errors.CardDeclined'"
    if not isinstance(value, list):
        errors["retry_policy.non_retryable"] = [
            f"Must be a JSON array of {example}, got {_json_type(value)}."]
        return list(default)
    if len(value) > MAX_NON_RETRYABLE:
        errors["retry_policy.non_retryable"] = [
            f"Holds {len(value)} names; use at most {MAX_NON_RETRYABLE} (a common base class "
            "covers its subclasses only by its own name, so list the ones raised)."]
        return list(default)
    for index, name in enumerate(value):
        if not (isinstance(name, str) and len(name) <= MAX_TEXT_LENGTH
                and EXCEPTION_NAME.match(name)):
            shown = printable(name[:64]) if isinstance(name, str) else name
            errors["retry_policy.non_retryable"] = [
                f"Item {index} ({shown!r}) is not an exception name; use {example}."]
            return list(default)
    return list(value)


def _timeouts(item: dict, base: ExecutionOptions, errors: Errors) -> tuple[int | None, int | None]:
    soft, hard = base.soft_timeout_ms, base.hard_timeout_ms
    if "soft_timeout_ms" in item:
        soft = _timeout(item, "soft_timeout_ms", errors)
    if "hard_timeout_ms" in item:
        hard = _timeout(item, "hard_timeout_ms", errors)
    if soft is not None and hard is not None and soft >= hard and \
            "soft_timeout_ms" not in errors and "hard_timeout_ms" not in errors:
        field = "soft_timeout_ms" if "soft_timeout_ms" in item else "hard_timeout_ms"
        errors[field] = [
            f"soft_timeout_ms ({soft}) must be below hard_timeout_ms ({hard}), so the task is "
            "warned (SoftTimeLimitExceeded) before it is killed; lower soft_timeout_ms or "
            "raise hard_timeout_ms."]
    return soft, hard


def _timeout(item: dict, key: str, errors: Errors) -> int | None:
    if item[key] is None:
        return None
    what = f"a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS} (a day), or null for no " \
           "limit"
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int):
        errors[key] = [f"Must be {what}, got {_json_type(value)}."]
        return None
    if not 1 <= value <= MAX_TIMEOUT_MS:
        errors[key] = [f"Is {value}; use {what}."]
    return value


def _choice(item: dict, key: str, choices: tuple[str, ...], what: str, errors: Errors, *,
            default: str) -> str:
    if key not in item:
        return default
    value = item[key]
    if not isinstance(value, str) or value not in choices:
        shown = f"'{printable(value[:64])}'" if isinstance(value, str) else _json_type(value)
        errors[key] = [f"{shown} is not {what}; use one of {', '.join(choices)}."]
        return default
    return value


def _check_jitter(jitter_ms: int, schedule: CronSchedule, now_ms: int, errors: Errors) -> None:
    """Jitter must stay below the shortest gap between the schedule's coming occurrences, so a
    delayed occurrence never passes the next one."""
    gap_ms = jitter_room_ms(schedule, now_ms)
    if jitter_ms >= gap_ms:
        errors["jitter_ms"] = [
            f"Is {jitter_ms}, not below the {gap_ms} ms between occurrences of this schedule; "
            f"use less than {gap_ms} so each occurrence fires before the next one."]


def _duration(ms: int) -> str:
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.0f} min"
    return f"{ms / 3_600_000:.0f} h"
