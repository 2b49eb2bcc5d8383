"""The rules a job spec must follow: the one validator of every way a job is made or changed.

The REST API (a single create, bulk ingest, PATCH), the Python API (:mod:`scheduler.api`), the
decorators (:mod:`scheduler.decorators`) and declared jobs (``chrono sync-jobs``, ``chrono
import-beat``: :mod:`scheduler.declared_jobs`) all call these functions, so a spec gets the same
answer whichever way it arrives (``tests/integration/test_one_way_in.py`` runs one table of every
rule through the Python API and REST, single and bulk). Pure: no ORM, no config, no clock (the
time and the limits come in a :class:`Limits`). What the Python API converts first (seconds to
milliseconds, tuples to lists) is conversion, not a rule: :mod:`scheduler.api`.

A spec is written in the job's own field names, those of the jobs table and of the REST API
(``job_type``, ``run_at``, ``delay_ms``, ``cron_expression``, ``retry_policy`` …); an error names
the field at fault in the same words (``retry_policy.multiplier`` for a key of the policy,
:data:`NON_FIELD` for a rule spanning fields). REST answers them as they are; the Python API names
its own argument instead (:func:`python_error`). Every message says what to change.

The bounds of a policy are on its dataclass (:class:`scheduler.retry.RetryPolicy`,
:class:`scheduler.misfire.MisfireRule`; the timeouts and the jitter on :class:`ExecutionOptions`);
text and payload rules are :mod:`scheduler.inputs`. A job's execution options (retries, timeouts,
overlap, misfire, jitter) are checked by :func:`parse_options` against a base: the defaults for a
create, the job's current options for a change.

One setting, one name: the number of attempts is ``retry_policy.max_attempts`` (the first run
counts). ``max_retries`` (= ``max_attempts`` − 1) is its deprecated alias, still accepted by the
REST API (where it is public and documented) and by the Python API with a DeprecationWarning; when
both are given they must agree. The jobs table keeps a ``max_retries`` column, written from
``max_attempts`` in one place (:attr:`ExecutionOptions.max_retries`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import ClassVar

from scheduler.calendars import calendar_names_problem
from scheduler.clock import datetime_to_ms
from scheduler.cron import CronSchedule, parse_cron, validate_timezone
from scheduler.errors import (
    InvalidJob,
    InvalidSchedule,
    PayloadTooLarge,
    SchedulerError,
    SpecInvalid,
)
from scheduler.inputs import (
    CONTROL_CHARACTER,
    choice_problem,
    control_character_problem,
    encode_payload,
    json_type,
    plain_payload,
    plain_python_payload,
    printable,
    whole_number_problem,
)
from scheduler.intervals import IntervalSchedule, period_problem
from scheduler.misfire import MisfirePolicy, MisfireRule, jitter_room_ms
from scheduler.retry import RetryPolicy, effective_policy
from scheduler.schedules import Schedule, hash_key_of

NON_FIELD = "non_field_errors"
MAX_TEXT_LENGTH = 200
# The furthest ahead a one-time job may be scheduled: beyond it a delay is surely a unit mistake.
MAX_AHEAD_MS = 100 * 366 * 86_400_000
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*\Z")
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:\-]+\Z")
# max_retries, the deprecated spelling of retry_policy.max_attempts - 1.
MAX_RETRIES = RetryPolicy.MAX_ATTEMPTS - 1
# The values of scheduler.models.OverlapPolicy (a test holds them equal): this module imports no
# Django.
OVERLAP_POLICIES = ("allow", "skip", "buffer_one", "cancel_previous")
MISFIRE_POLICIES = MisfireRule.POLICIES
RETRY_POLICY_FIELDS = RetryPolicy.FIELDS
OPTION_FIELDS = (
    "retry_policy", "soft_timeout_ms", "hard_timeout_ms", "overlap_policy", "misfire_policy",
    "misfire_fire_all_limit", "jitter_ms",
)  # fmt: skip
CRON_ONLY_FIELDS = ("overlap_policy", "jitter_ms")

SCHEDULE_FIELDS = ("run_at", "delay_ms", "cron_expression", "interval_ms")
INTERVAL_FIELDS = ("interval_ms", "interval_anchor")
CREATE_FIELDS = (
    "job_type", "name", "queue", "args", "kwargs", "max_retries",
    "run_at", "delay_ms", "cron_expression", "interval_ms", "interval_anchor", "timezone",
    *OPTION_FIELDS, "calendars",
)  # fmt: skip
UPDATE_FIELDS = ("run_at", "cron_expression", "timezone", *INTERVAL_FIELDS, "max_retries",
                 *OPTION_FIELDS, "calendars")
OPTION_CHANGE_FIELDS = frozenset(("max_retries", *OPTION_FIELDS))
_CREATE_FIELD_SET = frozenset(CREATE_FIELDS)
# The fields of a bulk item that the fast path (_plain_spec) takes; any other goes the full way.
_PLAIN_FIELDS = frozenset(("job_type", "name", "queue", "args", "kwargs", "delay_ms"))

Errors = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """How each occurrence of a job runs, validated: what a job row stores in ``retry_policy``,
    ``max_retries``, the timeouts, the policies and ``jitter_ms``. The bounds of the timeouts
    and the jitter are here; the retry policy's and the misfire rule's are on their dataclasses."""

    MAX_TIMEOUT_MS: ClassVar[int] = 86_400_000  # a day
    # A week; it must also stay below the schedule's period (misfire.jitter_room_ms).
    MAX_JITTER_MS: ClassVar[int] = 7 * 86_400_000

    max_attempts: int = 1
    # None: max_attempts with the default backoff (the row stores {}, as before policies).
    retry: RetryPolicy | None = None
    soft_timeout_ms: int | None = None
    hard_timeout_ms: int | None = None
    overlap_policy: str = "skip"
    misfire_policy: str = MisfirePolicy.FIRE_ONCE.value
    misfire_fire_all_limit: int = MisfireRule().fire_all_limit
    jitter_ms: int = 0

    @property
    def max_retries(self) -> int:
        """The jobs table's ``max_retries`` column: ``max_attempts`` − 1."""
        return self.max_attempts - 1

    @property
    def effective_retry(self) -> RetryPolicy:
        """The policy the worker gets: ``retry``, or the default backoff with max_attempts."""
        return self.retry or RetryPolicy(max_attempts=self.max_attempts)

    @property
    def retry_policy_row(self) -> dict[str, object]:
        """``retry_policy`` as the jobs table stores it ({} without a policy of its own)."""
        return {} if self.retry is None else self.retry.to_json()

    @property
    def retry_policy_json(self) -> str:
        """:attr:`retry_policy_row` as JSON text (the bulk COPY's)."""
        return "{}" if self.retry is None else json.dumps(self.retry.to_json())

    @property
    def misfire_rule(self) -> MisfireRule:
        return MisfireRule(MisfirePolicy(self.misfire_policy), self.misfire_fire_all_limit)


DEFAULT_OPTIONS = ExecutionOptions()


@dataclass(slots=True)
class JobSpec:
    """A validated job, ready for :mod:`scheduler.job_writer` (a row, or a line of the COPY)."""

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
    interval_ms: int | None = None
    anchor_ms: int | None = None  # an interval job's
    # A cron expression with H: its first occurrence is computed again once the job has its id
    # (the hash key), after this time (scheduler.job_writer.first_fire_ms).
    hashed_after_ms: int | None = None
    # Names of the tenant's exclusion calendars (checked against the tenant's calendars by the
    # job writer: scheduler.calendar_store).
    calendars: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits a spec is checked against, and the time it is checked at (read once per
    request or call: :func:`scheduler.job_writer.current_limits`)."""

    now_ms: int
    default_queue: str
    max_payload_bytes: int
    run_at_grace_ms: int


def unknown_field_errors(item: Mapping, allowed: tuple[str, ...], *, prefix: str = "") -> Errors:
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


# ------------------------------------------------------------------------------- a new job


def parse_job_spec(item: object, limits: Limits) -> JobSpec:
    """Validate one job of a create request; raises :class:`SpecInvalid` with every error."""
    return _plain_spec(item, limits) or checked_spec(item, limits)


def checked_spec(item: object, limits: Limits) -> JobSpec:
    """:func:`parse_job_spec` by every rule, one by one (the way every item that is not plain
    takes, and the one that words the errors)."""
    if not isinstance(item, dict):
        raise SpecInvalid({NON_FIELD: [f"A job is a JSON object, got {json_type(item)}."]})
    errors: Errors = ({} if item.keys() <= _CREATE_FIELD_SET
                      else unknown_field_errors(item, CREATE_FIELDS))
    causes: dict[str, InvalidSchedule] = {}
    job_type = _text(item, "job_type", errors, required=True, pattern=TASK_NAME,
                     example="a Celery task name such as 'billing.tasks.send_invoice'")
    name = _text(item, "name", errors, default="")
    queue, args, kwargs, args_json, kwargs_json, too_large = _basics(item, limits, errors)
    schedule, timezone, fire_at_ms = _schedule(item, limits, errors, causes)
    options = DEFAULT_OPTIONS
    if not OPTION_CHANGE_FIELDS.isdisjoint(item.keys()):  # the bulk path's common case skips it
        kind = "cron" if item.keys() & {"cron_expression", "interval_ms"} else "one-time"
        options = parse_options(item, DEFAULT_OPTIONS, errors, kind=kind, schedule=schedule,
                                now_ms=limits.now_ms)
    calendars = _calendars(item, errors, recurring=bool(
        item.keys() & {"cron_expression", "interval_ms"}))
    if errors:
        raise SpecInvalid(errors, too_large=too_large, causes=causes)
    if isinstance(schedule, IntervalSchedule):
        return JobSpec(job_type, name, queue, args, kwargs, args_json, kwargs_json, None,
                       timezone, fire_at_ms, options, interval_ms=schedule.period_ms,
                       anchor_ms=schedule.anchor_ms, calendars=calendars)
    hashed_after_ms = limits.now_ms if schedule is not None and schedule.hashed else None
    return JobSpec(job_type, name, queue, args, kwargs, args_json, kwargs_json,
                   schedule.expression if schedule else None, timezone, fire_at_ms, options,
                   hashed_after_ms=hashed_after_ms, calendars=calendars)


def _calendars(item: Mapping, errors: Errors, *, recurring: bool) -> tuple[str, ...]:
    """A job's ``calendars``: names of the tenant's exclusion calendars, for recurring jobs
    (whether the tenant has them is the job writer's to check)."""
    if "calendars" not in item:
        return ()
    value = item["calendars"]
    if problem := calendar_names_problem(value):
        errors["calendars"] = [problem]
        return ()
    if value and not recurring:
        errors["calendars"] = ["calendars apply to cron and interval jobs only (a one-time "
                               "job fires at the time it was given); leave it out."]
        return ()
    return tuple(value)


def check_declaration(item: object, limits: Limits) -> None:
    """Check a job declared in code (``@chrono_job``) before its task is looked up: every rule of
    :func:`checked_spec` for the fields it gives, none required (the task name is read when the
    job is synced or scheduled, the schedule is absent for a one-time-only task), and its
    execution options as a cron job's, which ``chrono sync-jobs`` makes of them. Raises
    :class:`SpecInvalid`."""
    if not isinstance(item, dict):
        raise SpecInvalid({NON_FIELD: [f"A job is a JSON object, got {json_type(item)}."]})
    errors: Errors = ({} if item.keys() <= _CREATE_FIELD_SET
                      else unknown_field_errors(item, CREATE_FIELDS))
    causes: dict[str, InvalidSchedule] = {}
    _basics(item, limits, errors)
    schedule = None
    if "cron_expression" in item:
        schedule = _cron(item, limits, errors, causes)[0]
    elif "interval_ms" in item:
        schedule = _interval(item, limits, errors)[0]
    parse_options(item, DEFAULT_OPTIONS, errors, kind="cron", schedule=schedule,
                  now_ms=limits.now_ms)
    _calendars(item, errors, recurring=True)
    if errors:
        raise SpecInvalid(errors, causes=causes)


def _plain_spec(item: object, limits: Limits) -> JobSpec | None:
    """The spec of the common bulk item, a one-time job by ``delay_ms`` with no options, when
    every field of it is plainly valid; None for anything else, which the rules above then
    check and word. It accepts only what they accept, with the same result (a test holds
    them to that), at 60% of their cost (13 ms instead of 22 for 5,000 items)."""
    if type(item) is not dict or not item.keys() <= _PLAIN_FIELDS:
        return None
    get = item.get
    return plain_fields_spec(get("job_type"), get("name", ""), get("queue", limits.default_queue),
                             get("delay_ms"), get("args", []), get("kwargs", {}), limits)


def plain_fields_spec(job_type: object, name: object, queue: object, delay_ms: object,
                      args: object, kwargs: object, limits: Limits, *,
                      from_python: bool = False) -> JobSpec | None:
    """:func:`_plain_spec` of the plain item's fields, given one by one: the REST bulk path's
    and ``api.schedule_many``'s common item (``from_python``: its payload is copied as JSON
    gives it back, :func:`scheduler.inputs.plain_python_payload`, and refused to the general
    way unless that copy equals it)."""
    if not (type(job_type) is str and type(name) is str and type(queue) is str
            and type(delay_ms) is int and 0 <= delay_ms <= MAX_AHEAD_MS
            and type(args) is list and type(kwargs) is dict
            and _plain_text(job_type, TASK_NAME) and _plain_text(queue, QUEUE_NAME)
            and len(name) <= MAX_TEXT_LENGTH
            # isprintable() is False for every control character (and a few others): it spares
            # most names the search.
            and (name.isprintable() or CONTROL_CHARACTER.search(name) is None)):
        return None
    if from_python:
        copied = plain_python_payload(args, kwargs, max_bytes=limits.max_payload_bytes)
        if copied is None:
            return None
        args, kwargs, args_json, kwargs_json = copied
    else:
        payload = plain_payload(args, kwargs, max_bytes=limits.max_payload_bytes)
        if payload is None:
            return None
        args_json, kwargs_json = payload
    return JobSpec(job_type, name, queue, args, kwargs, args_json.decode(), kwargs_json.decode(),
                   None, "UTC", limits.now_ms + delay_ms)


@lru_cache(maxsize=1024)  # the task names and queues of a bulk request repeat
def _plain_text(value: str, pattern: re.Pattern) -> bool:
    """``value`` passes :func:`_text` (length, no control character, ``pattern``)."""
    return (len(value) <= MAX_TEXT_LENGTH and CONTROL_CHARACTER.search(value) is None
            and bool(pattern.match(value)))


def idempotency_key_problem(key: object) -> str | None:
    """What to change in a job's idempotency key (None: no key); None when it is fine: 1 to 200
    characters, no control character (it is stored with the job, unique per tenant)."""
    if key is None:
        return None
    if not isinstance(key, str):
        return f"Must be a string, got {json_type(key)}."
    if not 1 <= len(key) <= MAX_TEXT_LENGTH:
        return f"Is {len(key)} characters long; use 1 to {MAX_TEXT_LENGTH}."
    return control_character_problem(key)


# --------------------------------------------------------------------------- a change of job


@dataclass(frozen=True, slots=True)
class JobChange:
    """What a change of one job comes to, checked against the job (:func:`plan_change`)."""

    # A cron job's schedule when the change gives a new expression or time zone, an interval
    # job's when it gives a new period or anchor, else None.
    schedule: Schedule | None
    # A one-time job's new fire time (ms), else None.
    fire_at_ms: int | None
    # The job's options before and after the change (equal when it changes none).
    base: ExecutionOptions
    options: ExecutionOptions


def parse_update(item: object, limits: Limits) -> dict[str, object]:
    """Validate a change on its own: ``{"run_at": fire ms}`` and/or ``cron_expression`` and
    ``timezone`` (checked against the job by :func:`plan_change`), and the execution options as
    sent (merged into the job's by :func:`plan_change`). Raises SpecInvalid."""
    if not isinstance(item, dict):
        raise SpecInvalid({NON_FIELD: [f"Send a JSON object, got {json_type(item)}."]})
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
    if "interval_ms" in item:
        if problem := period_problem(item["interval_ms"]):
            errors["interval_ms"] = [problem]
        else:
            changes["interval_ms"] = item["interval_ms"]
    if "interval_anchor" in item:
        anchor_ms = _anchor(item["interval_anchor"], errors, limits.now_ms)
        if anchor_ms is not None:
            changes["interval_anchor"] = anchor_ms
    changes |= {key: item[key] for key in OPTION_CHANGE_FIELDS if key in item}
    if "calendars" in item:
        if problem := calendar_names_problem(item["calendars"]):
            errors["calendars"] = [problem]
        else:
            changes["calendars"] = tuple(item["calendars"])
    if errors:
        raise SpecInvalid(errors)
    return changes


def plan_change(job: object, changes: Mapping[str, object], *, now_ms: int) -> JobChange:
    """Check ``changes`` (as :func:`parse_update` returns them) against ``job`` (a job row, or
    anything with its fields) as it will be: ``run_at`` is for one-time jobs, ``cron_expression``
    and ``timezone`` for cron jobs; the options are laid over the job's and checked together (a
    new soft timeout against the hard one it keeps, a new schedule against the jitter it keeps).
    Raises :class:`SpecInvalid`."""
    _check_timing_fields(job, changes)
    if changes.get("calendars") and not (job.cron_expression or getattr(job, "interval_ms",
                                                                        None)):
        raise SpecInvalid({"calendars": ["calendars apply to cron and interval jobs only; "
                                         "this is a one-time job."]})
    schedule: Schedule | None = None
    if job.cron_expression and changes.keys() & {"cron_expression", "timezone"}:
        schedule = _new_schedule(job, changes)
    if getattr(job, "interval_ms", None) and changes.keys() & {*INTERVAL_FIELDS, "timezone"}:
        timezone = changes.get("timezone", job.timezone)
        try:
            validate_timezone(timezone)
        except InvalidSchedule as exc:
            raise SpecInvalid({"timezone": [exc.message]}, causes={"timezone": exc}) from None
        schedule = IntervalSchedule(
            changes.get("interval_ms", job.interval_ms),
            changes.get("interval_anchor", _anchor_ms_of(job)), timezone)
    base = options_of(job)
    given = {key: value for key, value in changes.items() if key in OPTION_CHANGE_FIELDS}
    if not given and not (schedule is not None and job.jitter_ms):
        return JobChange(schedule, changes.get("run_at"), base, base)
    recurring = bool(job.cron_expression or getattr(job, "interval_ms", None))
    kind = "cron" if recurring else "one-time"
    jitter_schedule = schedule
    if jitter_schedule is None and recurring and "jitter_ms" in given:
        jitter_schedule = stored_schedule(job)
    errors: Errors = {}
    options = parse_options(given, base, errors, kind=kind, schedule=jitter_schedule,
                            now_ms=now_ms)
    if errors:
        raise SpecInvalid(errors)
    return JobChange(schedule, changes.get("run_at"), base, options)


def stored_schedule(job: object) -> Schedule | None:
    """The schedule a job row holds (its cron with H hashed from its id, or its interval)."""
    if job.cron_expression:
        return parse_cron(job.cron_expression, job.timezone, hash_key_of(job.job_id))
    if getattr(job, "interval_ms", None):
        return IntervalSchedule(job.interval_ms, _anchor_ms_of(job))
    return None


def _anchor_ms_of(job: object) -> int:
    anchor = getattr(job, "interval_anchor", None)
    return 0 if anchor is None else datetime_to_ms(anchor)


def _check_timing_fields(job: object, changes: Mapping[str, object]) -> None:
    interval_given = changes.keys() & set(INTERVAL_FIELDS)
    if getattr(job, "interval_ms", None):
        wrong = [key for key in ("run_at", "cron_expression") if key in changes]
        if wrong:
            raise SpecInvalid({wrong[0]: [
                "This is an interval job: change interval_ms or interval_anchor; run_at is "
                "for one-time jobs and cron_expression for cron jobs (create a cron job "
                "instead)."]})
        return
    if interval_given:
        field = sorted(interval_given)[-1]
        raise SpecInvalid({field: [
            "interval_ms and interval_anchor are for interval jobs; this job is not one "
            "(create an interval job instead)."]})
    if job.cron_expression and "run_at" in changes:
        raise SpecInvalid({"run_at": [
            "This is a cron job: change cron_expression or timezone; run_at is for "
            "one-time jobs."
        ]})
    if not job.cron_expression and changes.keys() & {"cron_expression", "timezone"}:
        field = "cron_expression" if "cron_expression" in changes else "timezone"
        raise SpecInvalid({field: [
            "This is a one-time job: change run_at; cron_expression and timezone are for "
            "cron jobs (create a cron job instead)."
        ]})


def _new_schedule(job: object, changes: Mapping[str, object]) -> CronSchedule:
    timezone = changes.get("timezone") or job.timezone
    try:
        validate_timezone(timezone)
        return parse_cron(changes.get("cron_expression") or job.cron_expression, timezone,
                          hash_key_of(job.job_id))
    except InvalidSchedule as exc:
        field = spec_field(exc.field)
        raise SpecInvalid({field: [exc.message]}, causes={field: exc}) from None


def parse_options(
    item: Mapping, base: ExecutionOptions, errors: Errors, *, kind: str,
    schedule: Schedule | None, now_ms: int,
) -> ExecutionOptions:
    """The execution options of ``item`` laid over ``base`` (the defaults for a create, the
    job's options for a change), with their messages in ``errors``. ``kind`` is ``"cron"`` or
    ``"one-time"`` (``"cron"`` covers interval jobs: both recur); ``schedule`` (a recurring
    job's, None when it is unknown or invalid) bounds the jitter. A ``retry_policy`` is merged
    key by key into base's."""
    max_attempts, retry = _retries(item, base, errors)
    soft, hard = _timeouts(item, base, errors)
    if kind != "cron":
        for key in CRON_ONLY_FIELDS:
            if key in item:
                errors[key] = [f"{key} applies to cron and interval jobs only (a one-time "
                               "job has one occurrence); leave it out."]
        item = {key: value for key, value in item.items() if key not in CRON_ONLY_FIELDS}
    overlap = _choice(item, "overlap_policy", OVERLAP_POLICIES, "an overlap policy", errors,
                      default=base.overlap_policy)
    misfire, fire_all_limit = _misfire(item, base, errors)
    jitter_ms = _whole_number(item, "jitter_ms", errors, default=base.jitter_ms,
                              high=ExecutionOptions.MAX_JITTER_MS, unit="milliseconds")
    if jitter_ms and schedule is not None and "jitter_ms" not in errors:
        _check_jitter(jitter_ms, schedule, now_ms, errors)
    return ExecutionOptions(max_attempts, retry, soft, hard, overlap, misfire, fire_all_limit,
                            jitter_ms)


def options_of(job: object) -> ExecutionOptions:
    """What a job row holds, as options (the base of a change)."""
    retry = effective_policy(job.retry_policy, job.max_retries) if job.retry_policy else None
    return ExecutionOptions(
        max_attempts=retry.max_attempts if retry else job.max_retries + 1, retry=retry,
        soft_timeout_ms=job.soft_timeout_ms, hard_timeout_ms=job.hard_timeout_ms,
        overlap_policy=job.overlap_policy, misfire_policy=job.misfire_policy,
        misfire_fire_all_limit=job.misfire_fire_all_limit, jitter_ms=job.jitter_ms,
    )


# ------------------------------------------------------------------- the Python API's words

# Job field -> the Python API's argument for it, where the names differ.
PYTHON_ARGUMENTS = {
    "job_type": "task_name", "run_at": "at", "delay_ms": "delay", "cron_expression": "cron",
    "retry_policy": "retry", "overlap_policy": "overlap", "misfire_policy": "misfire",
    "misfire_fire_all_limit": "misfire",
}
# How a message about a field begins in the Python API when the argument is not what it counts.
_PYTHON_LABELS = {"delay_ms": "delay, in milliseconds,", "misfire_fire_all_limit": "fire_all_limit"}
# Messages that begin with a verb about the field ("Is negative …", "Contains a control
# character …") read after its name; any other is written after "name: ".
_PREDICATES = ("Is ", "Must ", "Contains ", "Holds ", "Cannot ")
# A scheduler error's field (a Python argument, a part of a cron expression) -> job field.
_SPEC_FIELDS = {argument: field for field, argument in PYTHON_ARGUMENTS.items()} | {
    "misfire": "misfire_policy", "expression": "cron_expression",
    **{part: "cron_expression" for part in ("second", "minute", "hour", "day_of_month", "month",
                                            "day_of_week")},
}


def spec_field(scheduler_field: str | None) -> str:
    """The job field a scheduler error's ``field`` (a Python argument such as ``at``, a cron
    expression's part such as ``minute``) refers to; :data:`NON_FIELD` for none."""
    if not scheduler_field:
        return NON_FIELD
    return _SPEC_FIELDS.get(scheduler_field, scheduler_field)


def python_error(exc: SpecInvalid) -> SchedulerError:
    """The error the Python API raises for ``exc``: its first problem, under the Python
    argument's name (``task_name``, ``at``, ``retry`` for a key of the policy …), worded after it
    (``name contains a control character …``). A schedule's own error (an invalid cron, an
    unknown time zone) is raised as it was; a payload over the limit as PayloadTooLarge."""
    if exc.too_large:
        return PayloadTooLarge(exc.errors["args"][-1], field="args")
    field, messages = next(iter(exc.errors.items()))
    if field in exc.causes:
        return exc.causes[field]
    head, _, key = field.partition(".")
    if head == NON_FIELD:
        return InvalidJob(messages[0], field=None)
    argument = PYTHON_ARGUMENTS.get(head, head)
    label = key or _PYTHON_LABELS.get(head, argument)
    return InvalidJob(python_message(label, messages[0]), field=argument)


def python_problems(exc: SpecInvalid) -> list[tuple[str | None, str]]:
    """Every problem of ``exc`` as ``(Python argument or None, message)``, worded as
    :func:`python_error` words the first (a schedule's own error by its message): the per-item
    errors of :func:`scheduler.bulk_schedule.schedule_many`."""
    problems: list[tuple[str | None, str]] = []
    for field, messages in exc.errors.items():
        head, _, key = field.partition(".")
        if head == NON_FIELD:
            problems += [(None, message) for message in messages]
            continue
        argument = PYTHON_ARGUMENTS.get(head, head)
        if field in exc.causes:
            problems.append((argument, exc.causes[field].message))
            continue
        label = key or _PYTHON_LABELS.get(head, argument)
        problems += [(argument, python_message(label, message)) for message in messages]
    return problems


def python_message(label: str, message: str) -> str:
    """``message`` about ``label``, as one sentence: ``queue contains …``, ``queue: 'a b' …``;
    a message that names its fields itself (it begins in lower case) as it is."""
    if message[:1].islower():
        return message
    if message.startswith(_PREDICATES):
        return f"{label} {message[0].lower()}{message[1:]}"
    return f"{label}: {message}"


def retry_fields(retry: object) -> dict[str, object]:
    """A Python API's ``retry=`` (a RetryPolicy) as the spec's ``retry_policy``."""
    if not isinstance(retry, RetryPolicy):
        raise InvalidJob(f"retry= takes a RetryPolicy, got {type(retry).__name__}",
                         field="retry")
    return retry.to_json()


def misfire_fields(misfire: object) -> dict[str, object]:
    """A misfire rule (or a policy, or its name) as the spec's fields. A rule's limit bounds
    ``fire_all`` only, so it goes with that policy alone; with another it is held to its bounds
    all the same."""
    if isinstance(misfire, MisfireRule):
        problems = MisfireRule.problems({"fire_all_limit": misfire.fire_all_limit})
        if problems:
            raise InvalidJob(python_message("fire_all_limit", problems["fire_all_limit"]),
                             field="misfire")
        return misfire.to_fields()
    if isinstance(misfire, str):  # a MisfirePolicy is one
        return {"misfire_policy": misfire}
    raise InvalidJob(f"misfire= takes a MisfireRule, a MisfirePolicy or its name, got "
                     f"{type(misfire).__name__}", field="misfire")


def with_fire_at(spec: JobSpec, fire_at_ms: int) -> JobSpec:
    """``spec`` firing first at ``fire_at_ms`` (one-time jobs of one template)."""
    return dataclasses.replace(spec, fire_at_ms=fire_at_ms)


def fire_at_ms(value: object, limits: Limits) -> int:
    """A one-time job's ``run_at`` (an ISO 8601 text with an offset, or an aware datetime) as
    epoch ms, checked as in a create. Raises SpecInvalid."""
    errors: Errors = {}
    fire_ms = _run_at(value, limits, errors)
    if errors:
        raise SpecInvalid(errors)
    return fire_ms


# ----------------------------------------------------------------------------- field rules
# Each records its messages in ``errors`` and returns the value (or a default).


def _basics(item: Mapping, limits: Limits, errors: Errors
            ) -> tuple[str, list, dict, str, str, bool]:
    """The queue and the payload: ``(queue, args, kwargs, args JSON, kwargs JSON, too large)``."""
    queue = _text(item, "queue", errors, default=limits.default_queue, pattern=QUEUE_NAME,
                  example="letters, digits and . _ : - such as 'reports'")
    args = _typed(item, "args", list, "a JSON array", errors, default=[])
    kwargs = _typed(item, "kwargs", dict, "a JSON object", errors, default={})
    payload = encode_payload(args, kwargs, max_bytes=limits.max_payload_bytes)
    for key, messages in payload.errors.items():
        errors.setdefault(key, []).extend(messages)
    return (queue, args, kwargs, payload.args_json.decode(), payload.kwargs_json.decode(),
            payload.too_large)


def _text(item: Mapping, key: str, errors: Errors, *, default: str | None = None,
          required: bool = False, pattern: re.Pattern | None = None,
          example: str = "") -> str | None:
    if key not in item:
        if required:
            errors[key] = [f"This field is required: {example}." if example else
                           "This field is required."]
        return default
    value = item[key]
    if not isinstance(value, str):
        errors[key] = [f"Must be a string, got {json_type(value)}."]
        return default
    if len(value) > MAX_TEXT_LENGTH:
        errors[key] = [f"Is {len(value)} characters long; use at most {MAX_TEXT_LENGTH}."]
    elif problem := control_character_problem(value):
        errors[key] = [problem]
    elif pattern is not None and not pattern.match(value):
        errors[key] = [f"'{value}' is not valid here; use {example}." if value else
                       f"Must not be empty; use {example}."]
    return str(value)


def _whole_number(item: Mapping, key: str, errors: Errors, *, default: int, high: int,
                  low: int = 0, unit: str = "", field: str | None = None) -> int:
    value = item.get(key, default)
    if type(value) is int and low <= value <= high:  # the common case, before any message
        return value
    problem = whole_number_problem(value, low=low, high=high, unit=unit)
    if problem is None:
        return int(value)
    errors[field or key] = [problem]
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _typed(item: Mapping, key: str, kind: type, kind_name: str, errors: Errors, *, default):
    value = item.get(key, default)
    if not isinstance(value, kind):
        errors[key] = [f"Must be {kind_name}, got {json_type(value)}."]
        return default
    return value


def _schedule(
    item: Mapping, limits: Limits, errors: Errors, causes: dict[str, InvalidSchedule]
) -> tuple[Schedule | None, str, int]:
    """``(schedule or None, time zone, first fire ms)`` from exactly one schedule field."""
    given = [key for key in SCHEDULE_FIELDS if key in item]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        errors[NON_FIELD if not given else given[-1]] = [
            f"Give exactly one of run_at (ISO 8601 time with offset), delay_ms (milliseconds "
            f"from now), cron_expression or interval_ms; got {what}."
        ]
        return None, "UTC", 0
    if "interval_anchor" in item and given[0] != "interval_ms":
        errors["interval_anchor"] = [
            "interval_anchor applies to interval_ms only; give interval_ms too, or leave it out."]
    if given[0] == "interval_ms":
        return _interval(item, limits, errors)
    if "timezone" in item and given[0] != "cron_expression":
        errors["timezone"] = [
            "timezone applies to cron_expression only; write run_at with its UTC offset "
            "instead (e.g. 2030-01-01T09:00:00+01:00)."
        ]
    if given[0] == "run_at":
        return None, "UTC", _run_at(item["run_at"], limits, errors) or 0
    if given[0] == "delay_ms":
        return None, "UTC", _delay(item["delay_ms"], limits, errors)
    return _cron(item, limits, errors, causes)


def _run_at(value: object, limits: Limits, errors: Errors) -> int | None:
    example = "an ISO 8601 time with a UTC offset such as 2030-01-01T09:00:00Z"
    if isinstance(value, datetime):  # the Python API's
        when = value
        if when.tzinfo is None or when.utcoffset() is None:
            errors["run_at"] = ["Is a naive datetime; pass an aware one (e.g. with "
                                "tzinfo=UTC)."]
            return None
    elif not isinstance(value, str):
        errors["run_at"] = [f"Must be {example}, got {json_type(value)}."]
        return None
    # fromisoformat() reads "2030-01-01T09:00:00Z\x00" as a time: check first.
    elif problem := control_character_problem(value):
        errors["run_at"] = [problem]
        return None
    else:
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
            f"Must be a whole number of milliseconds (0 or more), got {json_type(value)}."
        ]
        return 0
    if value < 0:
        errors["delay_ms"] = [f"Is negative ({value}); use 0 or more milliseconds from now."]
    elif value > MAX_AHEAD_MS:
        errors["delay_ms"] = [f"Is more than 100 years ({MAX_AHEAD_MS} ms); give a smaller delay."]
    return limits.now_ms + value


def _interval(item: Mapping, limits: Limits, errors: Errors
              ) -> tuple[IntervalSchedule | None, str, int]:
    """An interval job's schedule: every ``interval_ms`` from ``interval_anchor`` (default: now,
    so the first occurrence is one period from now, as in Celery beat)."""
    timezone = _text(item, "timezone", errors, default="UTC")
    if "timezone" not in errors:
        try:
            validate_timezone(timezone)
        except InvalidSchedule as exc:
            errors["timezone"] = [exc.message]
    if problem := period_problem(item["interval_ms"]):
        errors["interval_ms"] = [problem]
        return None, "UTC", 0
    anchor_ms = limits.now_ms
    if "interval_anchor" in item:
        anchor_ms = _anchor(item["interval_anchor"], errors, limits.now_ms)
        if anchor_ms is None:
            return None, "UTC", 0
    schedule = IntervalSchedule(item["interval_ms"], anchor_ms)
    return schedule, timezone if "timezone" not in errors else "UTC", \
        schedule.next_fire_ms(limits.now_ms)


def _anchor(value: object, errors: Errors, now_ms: int) -> int | None:
    """``interval_anchor`` (ISO 8601 with an offset, or an aware datetime) as epoch ms."""
    example = "an ISO 8601 time with a UTC offset such as 2030-01-01T09:00:00Z"
    when = value
    if isinstance(value, str) and not control_character_problem(value):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            when = None
    if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
        shown = f"'{value[:64]}'" if isinstance(value, str) else json_type(value)
        errors["interval_anchor"] = [f"Must be {example}, got {shown}."]
        return None
    anchor_ms = datetime_to_ms(when)
    if abs(anchor_ms - now_ms) > MAX_AHEAD_MS:
        errors["interval_anchor"] = ["Is more than 100 years away; give a nearer time."]
        return None
    return anchor_ms


def _cron(item: Mapping, limits: Limits, errors: Errors, causes: dict[str, InvalidSchedule]
          ) -> tuple[CronSchedule | None, str, int]:
    expression = _text(item, "cron_expression", errors)
    timezone = _text(item, "timezone", errors, default="UTC")
    if "cron_expression" in errors or "timezone" in errors:
        return None, "UTC", 0
    try:
        validate_timezone(timezone)
        schedule = parse_cron(expression, timezone)
        return schedule, timezone, schedule.next_fire_ms(limits.now_ms)
    except InvalidSchedule as exc:
        field = spec_field(exc.field)
        errors[field] = [exc.message]
        causes[field] = exc
        return None, "UTC", 0


# Execution options.


def _retries(item: Mapping, base: ExecutionOptions, errors: Errors
             ) -> tuple[int, RetryPolicy | None]:
    """``(max_attempts, retry policy or None)``: the policy is None while neither this spec
    nor the job ever gave one (max_attempts then counts the attempts, default backoff)."""
    max_retries = _whole_number(item, "max_retries", errors, default=base.max_retries,
                                high=MAX_RETRIES)
    if "max_retries" in errors or ("max_retries" not in item and "retry_policy" not in item):
        return base.max_attempts, base.retry
    if "retry_policy" not in item:
        if base.retry is None:
            return max_retries + 1, None
        return max_retries + 1, dataclasses.replace(base.retry, max_attempts=max_retries + 1)
    given = item["retry_policy"]
    fields = _retry_policy(given, base.effective_retry.to_json() | {
        "max_attempts": max_retries + 1}, errors)
    if fields is None:
        return max_retries + 1, base.retry
    if "max_retries" in item and "max_attempts" in given and \
            fields["max_attempts"] != max_retries + 1:
        errors["retry_policy.max_attempts"] = [
            f"Is {fields['max_attempts']}, which contradicts max_retries {max_retries}: "
            "max_attempts counts the first run, so it must be max_retries + 1 = "
            f"{max_retries + 1}. Give one of the two, or make them agree."]
        return max_retries + 1, base.retry
    policy = RetryPolicy(**fields)
    return policy.max_attempts, policy


def _retry_policy(value: object, base: dict, errors: Errors) -> dict | None:
    """``base`` (a policy's fields) with the keys of ``value`` checked and laid over it
    (:meth:`RetryPolicy.problems`); None when one is wrong (its message is in ``errors``)."""
    if not isinstance(value, dict):
        errors["retry_policy"] = [
            f"Must be a JSON object with any of {', '.join(RETRY_POLICY_FIELDS)}, got "
            f"{json_type(value)}; leave it out for the default policy."]
        return None
    found = unknown_field_errors(value, RETRY_POLICY_FIELDS, prefix="retry_policy.")
    fields = base | {key: value[key] for key in RETRY_POLICY_FIELDS if key in value}
    for key, problem in RetryPolicy.problems(fields, given=value.keys()).items():
        found[f"retry_policy.{key}"] = [problem]
    errors.update(found)
    if found:
        return None
    fields["multiplier"] = float(fields["multiplier"])
    fields["non_retryable"] = list(fields["non_retryable"])
    return fields


def _misfire(item: Mapping, base: ExecutionOptions, errors: Errors) -> tuple[str, int]:
    """``(misfire policy, fire_all limit)`` (:meth:`MisfireRule.problems`)."""
    given = {name: item[key] for name, key in (("policy", "misfire_policy"),
                                               ("fire_all_limit", "misfire_fire_all_limit"))
             if key in item}
    if not given:
        return base.misfire_policy, base.misfire_fire_all_limit
    problems = MisfireRule.problems(given)
    for name, problem in problems.items():
        errors[f"misfire_{name}" if name == "policy" else "misfire_fire_all_limit"] = [problem]
    misfire = base.misfire_policy if "policy" in problems else str(
        given.get("policy", base.misfire_policy))
    fire_all_limit = given.get("fire_all_limit", base.misfire_fire_all_limit)
    if "fire_all_limit" in given and misfire != MisfirePolicy.FIRE_ALL and not problems:
        errors["misfire_fire_all_limit"] = [
            f"Applies to misfire_policy 'fire_all' only (this job's is '{misfire}'); add "
            "\"misfire_policy\": \"fire_all\" or leave misfire_fire_all_limit out."]
    if "fire_all_limit" in problems:
        fire_all_limit = base.misfire_fire_all_limit
    return misfire, fire_all_limit


def _timeouts(item: Mapping, base: ExecutionOptions, errors: Errors
              ) -> tuple[int | None, int | None]:
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


def _timeout(item: Mapping, key: str, errors: Errors) -> int | None:
    value = item[key]
    if value is None:
        return None
    cap = ExecutionOptions.MAX_TIMEOUT_MS
    what = f"a whole number of milliseconds from 1 to {cap} (a day), or null for no limit"
    if isinstance(value, bool) or not isinstance(value, int):
        errors[key] = [f"Must be {what}, got {json_type(value)}."]
        return None
    if not 1 <= value <= cap:
        errors[key] = [f"Is {value}; use {what}."]
    return int(value)


def _choice(item: Mapping, key: str, choices: tuple[str, ...], what: str, errors: Errors, *,
            default: str) -> str:
    if key not in item:
        return default
    value = item[key]
    if problem := choice_problem(value, choices, what):
        errors[key] = [problem]
        return default
    return str(value)


def _check_jitter(jitter_ms: int, schedule: Schedule, now_ms: int, errors: Errors) -> None:
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
