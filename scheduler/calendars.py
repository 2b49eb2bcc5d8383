"""Exclusion calendars: named sets of local days on which a job does not fire (Quartz's
calendars, Temporal's schedule exclusions, Airflow's holiday timetables).

Pure: no Django, no I/O; the rows are :class:`scheduler.models.Calendar`'s and the look-ups
:mod:`scheduler.calendar_store`'s. A calendar has a name (unique per tenant), an IANA time zone
and whole local days of that zone, given three ways that add up:

``dates``   ``"2026-12-25"``: one day;
``ranges``  ``"2026-12-24/2027-01-02"``: an ISO 8601 interval of dates, both ends included;
``rules``   the last three fields of a cron expression, ``day-of-month month day-of-week``,
            read by Chrono's own cron parser (:mod:`scheduler.cron`, with its names, ranges,
            lists, steps and the ``L``, ``W``, ``#`` extensions; not ``H``, which hashes a job's
            id and means nothing for a calendar): ``"* * SAT,SUN"`` every weekend,
            ``"25 DEC *"`` Christmas, ``"* * 5L"`` the last Friday of every month. When both day
            fields are restricted a day matches if either does, as in cron.

A fire time (a UTC instant, jitter included: the time the job would run) is excluded when its
date in the *calendar's* zone is one of those days, so one calendar means the same days for jobs
in every zone: Tokyo's 25 December is 15:00 UTC on the 24th to 15:00 UTC on the 25th, New
York's 05:00 UTC on the 25th to 05:00 UTC on the 26th. A day is the local day, 23 or 25 hours
long on a daylight-saving day.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Protocol

from scheduler.cron import CronSchedule, parse_cron, validate_timezone
from scheduler.errors import InvalidSchedule, SpecInvalid
from scheduler.inputs import control_character_problem, json_type

CALENDAR_FIELDS = ("name", "timezone", "description", "dates", "ranges", "rules")
LIST_FIELDS = ("dates", "ranges", "rules")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}\Z")
MAX_ENTRIES = 1_000  # per list: a century of holidays, and a bound on a request's work
MAX_DESCRIPTION_LENGTH = 1_000
MAX_CALENDARS_PER_JOB = 10
# How far ahead a job's calendars are searched for an occurrence they do not exclude, before
# the job is refused as one that never fires (a yearly job excluded for five years is surely a
# mistake) and how far a listing of fire times looks.
HORIZON_MS = 5 * 366 * 86_400_000
SKIP_REASON_PREFIX = "calendar "

Errors = dict[str, list[str]]


class _Schedule(Protocol):
    def next_fire_ms(self, after_ms: int) -> int: ...


@dataclass(frozen=True)
class ExclusionCalendar:
    """A validated calendar: build one with :func:`parse_calendar` (or directly from values
    already checked, as a stored row holds them)."""

    name: str
    timezone: str
    dates: frozenset[date] = frozenset()
    ranges: tuple[tuple[date, date], ...] = ()
    rules: tuple[str, ...] = ()
    zone: zoneinfo.ZoneInfo = field(init=False, repr=False, compare=False)
    _rule_schedules: tuple[CronSchedule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", validate_timezone(self.timezone))
        object.__setattr__(self, "_rule_schedules",
                           tuple(_rule_schedule(rule) for rule in self.rules))

    def excludes_day(self, day: date) -> bool:
        """True when the local date ``day`` is one of the calendar's days."""
        return (day in self.dates
                or any(start <= day <= end for start, end in self.ranges)
                or any(rule.matches_date(day) for rule in self._rule_schedules))

    def local_date(self, at_ms: int) -> date:
        """The date in the calendar's zone at the instant ``at_ms``."""
        return datetime.fromtimestamp(at_ms // 1000, self.zone).date()

    def excludes(self, at_ms: int) -> bool:
        """True when the instant ``at_ms`` (UTC epoch ms) falls on one of the calendar's days."""
        return self.excludes_day(self.local_date(at_ms))

    def next_day_start_ms(self, at_ms: int) -> int:
        """The first instant of the local day after the one ``at_ms`` falls on."""
        return day_start_ms(self.local_date(at_ms) + timedelta(days=1), self.zone)

    def to_document(self) -> dict[str, object]:
        """The calendar as the REST API, the admin and ``--calendar FILE`` write it."""
        return {"name": self.name, "timezone": self.timezone,
                "dates": sorted(day.isoformat() for day in self.dates),
                "ranges": [f"{start.isoformat()}/{end.isoformat()}" for start, end in self.ranges],
                "rules": list(self.rules)}


def day_start_ms(day: date, zone: zoneinfo.ZoneInfo) -> int:
    """The first instant of the local date ``day`` in ``zone``: its midnight, or, where the
    clocks skip midnight (America/Havana in March), the end of that gap (``fold=0`` reads a
    skipped wall time with the offset before the change, which is the instant the gap ends)."""
    return int(datetime(day.year, day.month, day.day, tzinfo=zone).timestamp()) * 1000


def skip_reason(name: str) -> str:
    """The reason a skipped occurrence is recorded with in the ledger."""
    return f"{SKIP_REASON_PREFIX}{name}"


def excluding_calendar(calendars: Sequence[ExclusionCalendar], at_ms: int) -> str | None:
    """The name of the first of ``calendars`` that excludes ``at_ms``; None when none does."""
    for calendar in calendars:
        if calendar.excludes(at_ms):
            return calendar.name
    return None


def allowed_fire_times(schedule: _Schedule, calendars: Sequence[ExclusionCalendar],
                       after_ms: int, count: int, *, fire_time: Callable[[int], int] = int,
                       max_spread_ms: int = 0, horizon_ms: int = HORIZON_MS) -> list[int]:
    """Up to ``count`` fire times of ``schedule`` after ``after_ms`` that no calendar excludes,
    within ``horizon_ms``. ``fire_time`` maps an occurrence to the time it fires (a job's
    jitter, spreading it by less than ``max_spread_ms``); the calendars judge that time. An
    excluded day is stepped over at once, not occurrence by occurrence (a minutely job over a
    fortnight's holiday costs a few look-ups, not 20,000)."""
    found: list[int] = []
    until_ms = after_ms + horizon_ms
    occurrence = schedule.next_fire_ms(after_ms)
    while len(found) < count and occurrence <= until_ms:
        fires_at = fire_time(occurrence)
        excluding = next((c for c in calendars if c.excludes(fires_at)), None)
        if excluding is None:
            found.append(fires_at)
            occurrence = schedule.next_fire_ms(occurrence)
            continue
        # The next occurrence that could fire after the excluded day (its spread included).
        floor = excluding.next_day_start_ms(fires_at) - max_spread_ms - 1
        occurrence = schedule.next_fire_ms(max(occurrence, floor))
    return found


def never_fires_problem(schedule: _Schedule, calendars: Sequence[ExclusionCalendar],
                        after_ms: int) -> str | None:
    """What to change when ``calendars`` exclude every occurrence of ``schedule`` in the
    :data:`HORIZON_MS` after ``after_ms`` (a job that would never fire); None when one is left."""
    if not calendars or allowed_fire_times(schedule, calendars, after_ms, 1):
        return None
    names = ", ".join(c.name for c in calendars)
    return (f"The calendars {names} exclude every occurrence of this job in the next five "
            "years, so it would never fire; remove a calendar or change the schedule.")


# ------------------------------------------------------------------------------- validation


def parse_calendar(document: object) -> ExclusionCalendar:
    """Validate a calendar as the REST API, the admin and ``--calendar FILE`` give it; raises
    :class:`SpecInvalid` with what to change per field (``dates[2]``, ``rules[0]`` …)."""
    errors = calendar_problems(document)
    if errors:
        raise SpecInvalid(errors)
    assert isinstance(document, Mapping)
    return ExclusionCalendar(
        name=document["name"], timezone=document.get("timezone", "UTC"),
        dates=frozenset(date.fromisoformat(d) for d in document.get("dates", [])),
        ranges=tuple(_range(r) for r in document.get("ranges", [])),
        rules=tuple(" ".join(r.split()) for r in document.get("rules", [])))


def calendar_problems(document: object, *, partial: bool = False) -> Errors:
    """What to change in a calendar document, per field; empty when nothing. ``partial``: a
    change (PATCH), where every field may be left out."""
    if not isinstance(document, Mapping):
        return {"non_field_errors": [f"A calendar is a JSON object, got {json_type(document)}."]}
    errors: Errors = {}
    for key in document:
        if key not in CALENDAR_FIELDS:
            errors[str(key)] = [f"Unknown field; the fields are: {', '.join(CALENDAR_FIELDS)}."]
    if "name" in document or not partial:
        if problem := name_problem(document.get("name")):
            errors["name"] = [problem]
    if "timezone" in document:
        if problem := _timezone_problem(document["timezone"]):
            errors["timezone"] = [problem]
    if "description" in document:
        value = document["description"]
        if not isinstance(value, str):
            errors["description"] = [f"Must be a string, got {json_type(value)}."]
        elif len(value) > MAX_DESCRIPTION_LENGTH:
            errors["description"] = [
                f"Is {len(value)} characters long; use at most {MAX_DESCRIPTION_LENGTH}."]
        elif "\x00" in value:  # PostgreSQL cannot store NUL; other text is the user's
            errors["description"] = ["Holds a NUL character (U+0000); remove it."]
    for key, check in (("dates", _date_problem), ("ranges", _range_problem),
                       ("rules", _rule_problem)):
        if key in document:
            errors |= _list_problems(key, document[key], check)
    return errors


def name_problem(name: object) -> str | None:
    """What to change in a calendar's name; None when it is fine."""
    if not isinstance(name, str):
        return ("Required: a name of 1 to 100 letters, digits and _ . : - (e.g. 'us-holidays')"
                if name is None else f"Must be a string, got {json_type(name)}.")
    if not NAME.match(name):
        return (f"Is '{name[:120]}'; use 1 to 100 letters, digits and _ . : -, starting with a "
                "letter or digit (e.g. 'us-holidays').")
    return None


def calendar_names_problem(value: object) -> str | None:
    """What to change in a job's ``calendars`` (a list of calendar names); None when fine."""
    if not isinstance(value, list | tuple):
        return ("Must be a list of calendar names such as [\"us-holidays\"], got "
                f"{json_type(value)}.")
    wrong = [v for v in value if not isinstance(v, str)]
    if wrong:
        return f"Must hold calendar names (strings), got {json_type(wrong[0])} in it."
    if len(value) > MAX_CALENDARS_PER_JOB:
        return f"Names {len(value)} calendars; a job takes at most {MAX_CALENDARS_PER_JOB}."
    for name in value:
        if problem := name_problem(name):
            return f"'{name[:120]}': {problem}"
    if len(set(value)) != len(value):
        return "Names a calendar twice; name each once."
    return None


def _timezone_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"Must be an IANA time zone name such as 'Europe/Paris', got {json_type(value)}."
    try:
        validate_timezone(value)
    except InvalidSchedule as exc:
        return str(exc)
    return None


def _list_problems(key: str, value: object, check: Callable[[str], str | None]) -> Errors:
    if not isinstance(value, list):
        return {key: [f"Must be a list of strings, got {json_type(value)}."]}
    if len(value) > MAX_ENTRIES:
        return {key: [f"Has {len(value)} entries; use at most {MAX_ENTRIES}."]}
    errors: Errors = {}
    for index, item in enumerate(value):
        if not isinstance(item, str):
            errors[f"{key}[{index}]"] = [f"Must be a string, got {json_type(item)}."]
        elif problem := control_character_problem(item) or check(item):
            errors[f"{key}[{index}]"] = [problem]
    return errors


def _date_problem(text: str) -> str | None:
    try:
        _date(text)
    except ValueError:
        return f"Is '{text[:40]}'; write a date as YYYY-MM-DD, such as '2026-12-25'."
    return None


def _date(text: str) -> date:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise ValueError(text)
    return date.fromisoformat(text)


def _range(text: str) -> tuple[date, date]:
    start, _, end = text.partition("/")
    return _date(start.strip()), _date(end.strip())


def _range_problem(text: str) -> str | None:
    try:
        start, end = _range(text)
    except ValueError:
        return (f"Is '{text[:60]}'; write a range as START/END, two dates YYYY-MM-DD both "
                "included, such as '2026-12-24/2027-01-02'.")
    if end < start:
        return f"Ends ({end}) before it starts ({start}); give the earlier date first."
    return None


def _rule_problem(text: str) -> str | None:
    fields = text.split()
    if len(fields) != 3:
        return (f"Is '{text[:60]}' ({len(fields)} fields); a rule is three cron fields, "
                "day-of-month month day-of-week, such as '* * SAT,SUN' or '25 DEC *'.")
    if any("H" in part.upper().replace("THU", "") for part in fields):
        return "H hashes a job's id and means nothing in a calendar; write the days themselves."
    try:
        _rule_schedule(" ".join(fields))
    except InvalidSchedule as exc:
        return f"'{text[:60]}': {exc}"
    return None


def _rule_schedule(rule: str) -> CronSchedule:
    """A rule read as the day fields of a cron expression (its time fields, midnight, play no
    part: :meth:`CronSchedule.matches_date` reads the day fields alone)."""
    return parse_cron(f"0 0 {rule}", "UTC")
