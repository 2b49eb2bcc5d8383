"""The rules a job sent to the REST API must follow, as plain functions (no DRF, no ORM).

The single create (through :class:`~chronoadmin.api.serializers.JobCreateSerializer`) and the
bulk path (tens of thousands of items a second) share these functions, so an item gets the same
message whichever way it arrives. Every message says what to change.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import datetime

import orjson

from chronoadmin.api.errors import NON_FIELD, api_field
from scheduler.clock import datetime_to_ms
from scheduler.cron import parse_cron, validate_timezone
from scheduler.errors import InvalidSchedule

MAX_RETRIES = 100
MAX_TEXT_LENGTH = 200
# The furthest ahead a one-time job may be scheduled: beyond it a delay is surely a unit mistake.
MAX_AHEAD_MS = 100 * 366 * 86_400_000
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*\Z")
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:\-]+\Z")
SCHEDULE_FIELDS = ("run_at", "delay_ms", "cron_expression")
CREATE_FIELDS = (
    "job_type", "name", "queue", "args", "kwargs", "max_retries",
    "run_at", "delay_ms", "cron_expression", "timezone",
)  # fmt: skip
UPDATE_FIELDS = ("run_at", "cron_expression", "timezone")
_CREATE_FIELD_SET = frozenset(CREATE_FIELDS)

Errors = dict[str, list[str]]


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
    max_retries: int
    cron_expression: str | None
    timezone: str
    fire_at_ms: int


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


def unknown_field_errors(item: dict, allowed: tuple[str, ...]) -> Errors:
    """One error per key of ``item`` that is not in ``allowed``, with a suggestion."""
    errors: Errors = {}
    for key in item:
        if key in allowed:
            continue
        # A NUL in the name is echoed escaped: PostgreSQL cannot store it (idempotency records
        # keep the answer), and a client cannot act on an invisible character anyway.
        name = str(key).replace("\x00", "\\u0000")
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        errors[name] = [f"Unknown field; {hint}the fields are: {', '.join(allowed)}."]
    return errors


def parse_job_spec(item: object, limits: Limits) -> JobSpec:
    """Validate one job of a create request; raises :class:`SpecInvalid` with every error."""
    if not isinstance(item, dict):
        raise SpecInvalid({NON_FIELD: [f"A job is a JSON object, got {_json_type(item)}."]})
    errors = {} if item.keys() <= _CREATE_FIELD_SET else unknown_field_errors(item, CREATE_FIELDS)
    job_type = _text(item, "job_type", errors, required=True, pattern=TASK_NAME,
                     example="a Celery task name such as 'billing.tasks.send_invoice'")
    name = _text(item, "name", errors, default="")
    queue = _text(item, "queue", errors, default=limits.default_queue, pattern=QUEUE_NAME,
                  example="letters, digits and . _ : - such as 'reports'")
    max_retries = _whole_number(item, "max_retries", errors, default=0, high=MAX_RETRIES)
    args = _typed(item, "args", list, "a JSON array", errors, default=[])
    kwargs = _typed(item, "kwargs", dict, "a JSON object", errors, default={})
    args_json, kwargs_json, too_large = _payload(args, kwargs, limits, errors)
    cron, timezone, fire_at_ms = _schedule(item, limits, errors)
    if errors:
        raise SpecInvalid(errors, too_large=too_large)
    return JobSpec(job_type, name, queue, args, kwargs, args_json, kwargs_json, max_retries,
                   cron, timezone, fire_at_ms)


def parse_update(item: object, limits: Limits) -> dict[str, object]:
    """Validate a PATCH of a job's timing: ``{"run_at": datetime}`` and/or ``cron_expression``
    and ``timezone`` (checked by :func:`scheduler.api.reschedule`). Raises SpecInvalid."""
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
    if errors:
        raise SpecInvalid(errors)
    return changes


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
    elif "\x00" in value:
        errors[key] = ["Contains a NUL character (\\u0000); remove it."]
    elif pattern is not None and not pattern.match(value):
        errors[key] = [f"'{value}' is not valid here; use {example}." if value else
                       f"Must not be empty; use {example}."]
    return value


def _whole_number(item: dict, key: str, errors: Errors, *, default: int, high: int) -> int:
    value = item.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        errors[key] = [f"Must be a whole number from 0 to {high}, got {_json_type(value)}."]
        return default
    if not 0 <= value <= high:
        errors[key] = [f"Is {value}; use a whole number from 0 to {high}."]
    return value


def _typed(item: dict, key: str, kind: type, kind_name: str, errors: Errors, *, default):
    value = item.get(key, default)
    if not isinstance(value, kind):
        errors[key] = [f"Must be {kind_name}, got {_json_type(value)}."]
        return default
    return value


def _payload(args: list, kwargs: dict, limits: Limits, errors: Errors) -> tuple[str, str, bool]:
    args_json, kwargs_json = orjson.dumps(args), orjson.dumps(kwargs)
    for key, dumped in (("args", args_json), ("kwargs", kwargs_json)):
        if b"\\u0000" in dumped:
            errors[key] = ["Contains a NUL character (\\u0000), which cannot be stored; "
                           "remove it or encode the data (e.g. base64)."]
    size = len(args_json) + len(kwargs_json) + 3  # as the JSON array [args, kwargs]
    too_large = size > limits.max_payload_bytes
    if too_large:
        errors["args"] = [
            f"args and kwargs are {size} bytes as JSON; the limit is {limits.max_payload_bytes} "
            "bytes. Pass a reference (an id, a URL) instead of the data itself."
        ]
    return args_json.decode(), kwargs_json.decode(), too_large


def _schedule(item: dict, limits: Limits, errors: Errors) -> tuple[str | None, str, int]:
    """``(cron expression or None, time zone, first fire ms)`` from exactly one schedule field."""
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


def _cron(item: dict, limits: Limits, errors: Errors) -> tuple[str | None, str, int]:
    expression = _text(item, "cron_expression", errors)
    timezone = _text(item, "timezone", errors, default="UTC")
    if "cron_expression" in errors or "timezone" in errors:
        return None, "UTC", 0
    try:
        validate_timezone(timezone)
        schedule = parse_cron(expression, timezone)
        return schedule.expression, timezone, schedule.next_fire_ms(limits.now_ms)
    except InvalidSchedule as exc:
        errors[api_field(exc.field)] = [exc.message]
        return None, "UTC", 0


def _duration(ms: int) -> str:
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.0f} min"
    return f"{ms / 3_600_000:.0f} h"
