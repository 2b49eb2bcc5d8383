"""Cron expressions: parsing, validation and fire times in an IANA time zone.

A cron job is written against the wall clock of its time zone, but Chrono dispatches on UTC
epoch milliseconds. This module turns one into the other, with the daylight-saving rules of
Debian cron (the product's decision 10, and Debian's ``entry.c``):

* A job is WILDCARD when its minute or its hour field BEGINS with ``*`` (``0 * * * *``,
  ``*/15 * * * *``, ``0 */2 * * *``, ``@hourly``); every other job is FIXED-TIME (``30 2 * * *``,
  ``0 1,2 * * *``, ``0 0-10/2 * * *``, ``54-55/3 0-3 * * *``, ``H H * * *``, ``@daily``). A step
  alone does not make a wildcard: only a leading ``*`` does. The seconds field plays no part.
* When the clocks spring forward, wall times in the gap do not exist. A fixed-time job due in
  the gap fires once, at the first instant after it (New York 02:30 becomes 03:00 EDT); several
  skipped times on the same day collapse into that one fire. A wildcard job simply has no
  occurrence in the gap: it follows the wall clock.
* When the clocks fall back, wall times in the overlap happen twice. A fixed-time job fires once,
  at the first occurrence; a wildcard job fires at both (``0 * * * *`` fires at 01:00 EDT and again
  at 01:00 EST).

Occurrences are enumerated in wall-clock time field by field (no minute-by-minute scan), then
mapped to UTC with :mod:`zoneinfo`. croniter is not used at run time: its DST handling is
unreliable and its errors do not name the offending field. (cronsim, which follows Debian, is the
reference of a property test, not a run-time dependency: it scans second by second.)

Syntax: five fields (minute hour day-of-month month day-of-week), six fields with seconds first
(Quartz/Spring order), or one of the macros in :data:`MACROS`. Each field is ``*``, a number, a
range ``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n``, or a comma-separated list of these; months
and weekdays also take English three-letter names, day-of-week 7 is Sunday (so ``sat-sun`` is the
weekend), and ``?`` means ``*`` in the two day fields. Other ranges do not wrap around. The
extensions ``L``, ``L-n``, ``LW``, ``nW`` (day-of-month), ``dL``, ``d#k`` (day-of-week) and ``H``
(any field, hashed from the job's hash key) are :mod:`scheduler.cron_extensions`'. When both day
fields are restricted (neither starts with ``*`` or is ``?``), a day matches if EITHER matches
(the Vixie cron rule); otherwise both must match. The expression is ASCII: numbers are written
with the digits 0-9 and fields are separated by ASCII white space (a superscript, another
script's digit or a Unicode space is an error naming its field).
"""

from __future__ import annotations

import calendar
import difflib
import functools
import operator
import re
import unicodedata
import zoneinfo
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from scheduler import cron_extensions
from scheduler.cron_extensions import DayRule, rule_days
from scheduler.errors import CronNeverFires, InvalidCronExpression, UnknownTimeZone

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

PARSE_CACHE_SIZE = 4096

_FIELD_COUNT_HINT = (
    "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first"
)
_MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
# February counts 29 days: a schedule for the 29th fires in leap years.
_MOST_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# The Gregorian calendar repeats every 400 years, so a search that finds nothing in that many
# months never will; parse_cron rejects such schedules, this only guards against a loop.
_MAX_MONTHS_SEARCHED = 400 * 12
# Names that ZoneInfo resolves but that describe this host's configuration, not an IANA zone.
_HOST_ZONE_NAMES = frozenset({"localtime", "posixrules"})
# Fields are separated by ASCII white space only: str.split() would also split on the
# information separators U+001C-U+001F, NEL and every Unicode space.
_FIELD_SEPARATOR = re.compile(r"[ \t\n\r\f\v]+")
_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
_MIDNIGHT = (0, 0, 0)


@dataclass(frozen=True)
class _Field:
    """How one cron field is named, bounded and spelled."""

    name: str
    label: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name_value: int = 0

    def value_of(self, token: str) -> int | None:
        """The number a token stands for, or None if it is neither a number nor a known name."""
        if not token.isascii():  # isdigit() accepts '²' (int() refuses it) and '٣' (int() reads 3)
            return None
        if token.isdigit():
            return int(token)
        lowered = token.lower()
        if lowered in self.names:
            return self.names.index(lowered) + self.first_name_value
        return None


_SECOND_FIELD = _Field("second", "second", 0, 59)
_MINUTE_FIELD = _Field("minute", "minute", 0, 59)
_HOUR_FIELD = _Field("hour", "hour", 0, 23)
_DAY_OF_MONTH_FIELD = _Field("day_of_month", "day-of-month", 1, 31)
_MONTH_FIELD = _Field(
    "month", "month", 1, 12,
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1,
)  # fmt: skip
_DAY_OF_WEEK_FIELD = _Field(
    "day_of_week", "day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat"), 0
)
_FIVE_FIELDS = (_MINUTE_FIELD, _HOUR_FIELD, _DAY_OF_MONTH_FIELD, _MONTH_FIELD, _DAY_OF_WEEK_FIELD)
_SIX_FIELDS = (_SECOND_FIELD, *_FIVE_FIELDS)
_DAY_FIELDS = (_DAY_OF_MONTH_FIELD, _DAY_OF_WEEK_FIELD)


@dataclass(frozen=True)
class CronSchedule:
    """A validated cron expression in a time zone; computes fire times as UTC epoch ms.

    Build one with :func:`parse_cron`. Field values are sorted; ``days_of_week`` counts
    0 = Sunday to 6 = Saturday. ``days_either`` is the Vixie rule: True when both day fields are
    restricted, so a day matches if its day of month OR its weekday matches.
    """

    expression: str
    timezone: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: frozenset[int]
    months: tuple[int, ...]
    days_of_week: frozenset[int]
    days_either: bool
    fixed_time: bool
    # L / W rules of day-of-month, L / # rules of day-of-week (cron_extensions).
    month_day_rules: tuple[DayRule, ...] = ()
    week_day_rules: tuple[DayRule, ...] = ()
    # What H was hashed from (the job id); "" when the expression has no H.
    hash_key: str = ""
    hashed: bool = False  # the expression uses H
    zone: zoneinfo.ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", validate_timezone(self.timezone))

    def next_fire_ms(self, after_ms: int) -> int:
        """The first fire time strictly after ``after_ms``, both in UTC epoch milliseconds."""
        # Fire times fall on whole seconds, so "after after_ms" is "after its whole second".
        after_s = operator.index(after_ms) // 1000
        return self._next_fire_s(after_s) * 1000

    def fire_times_ms(self, after_ms: int, count: int) -> list[int]:
        """The next ``count`` fire times strictly after ``after_ms``, in increasing order."""
        if count < 0:
            raise ValueError(f"count must be 0 or more, got {count}")
        fire_times: list[int] = []
        fire_ms = after_ms
        for _ in range(count):
            fire_ms = self.next_fire_ms(fire_ms)
            fire_times.append(fire_ms)
        return fire_times

    def matches_date(self, day: date) -> bool:
        """True when ``day`` (a local date) matches the day-of-month, month and day-of-week
        fields, whatever the time fields say: how an exclusion calendar's rule
        (:mod:`scheduler.calendars`) is read."""
        return day.month in self.months and self._first_matching_day(
            day.year, day.month, day.day) == day.day

    def dst_note(self, fire_ms: int) -> str | None:
        """Why a fire time is what it is around a DST transition, or None for an ordinary one:
        ``after the gap`` (a wall time the clocks skipped fired at the first instant after),
        ``repeated hour: once`` (a fixed-time job's wall time that happens twice fired at its
        first pass only), ``repeated hour: first pass`` / ``second pass`` (a wildcard job's)."""
        fire_s = operator.index(fire_ms) // 1000
        wall = _wall_at(fire_s, self.zone)
        first_pass_s, second_pass_s = _instants_of(wall, self.zone)
        if first_pass_s < second_pass_s:
            if self.fixed_time:
                return "repeated hour: once"
            return "repeated hour: first pass" if fire_s == first_pass_s else \
                "repeated hour: second pass"
        before = _wall_at(fire_s - 1, self.zone) + _SECOND
        if self.fixed_time and before < wall and self._next_wall(before) < wall:
            return "after the gap"
        return None

    # Mapping wall-clock occurrences to UTC.

    def _next_fire_s(self, after_s: int) -> int:
        """First fire time strictly after ``after_s``, both in UTC epoch seconds."""
        wall = _wall_at(after_s, self.zone)
        first_pass_s, second_pass_s = _instants_of(wall, self.zone)
        if first_pass_s < second_pass_s:
            return self._next_fire_in_overlap(after_s, wall, first_pass_s, second_pass_s)
        return self._first_fire_from(wall + _SECOND, after_s)

    def _next_fire_in_overlap(
        self, after_s: int, wall: datetime, first_pass_s: int, second_pass_s: int
    ) -> int:
        """Next fire when ``after_s`` falls in a repeated (fall-back) stretch of wall time."""
        transition_s = _transition_between(first_pass_s, second_pass_s, self.zone)
        overlap_start = _wall_at(transition_s, self.zone)
        overlap_end = _wall_at(transition_s - 1, self.zone) + _SECOND
        if after_s < transition_s:
            fire_s = self._first_fire_from(wall + _SECOND, after_s)
            if self.fixed_time:
                return fire_s
            repeat = self._next_wall(overlap_start)
            if repeat < overlap_end:
                fire_s = min(fire_s, _instants_of(repeat, self.zone)[1])
            return fire_s
        if not self.fixed_time:
            repeat = self._next_wall(wall + _SECOND)
            if repeat < overlap_end:
                return _instants_of(repeat, self.zone)[1]
        return self._first_fire_from(overlap_end, after_s)

    def _first_fire_from(self, start: datetime, after_s: int) -> int:
        """First instant after ``after_s`` at which a matching wall time from ``start`` occurs.

        Only first occurrences are considered (second ones are the overlap method's business),
        and they never go back in time as the wall time advances, so the first one past
        ``after_s`` is the answer. A wall time in a spring-forward gap yields the end of the gap
        for a fixed-time job and nothing for a wildcard job.
        """
        wall = start
        while True:
            wall = self._next_wall(wall)
            first_pass_s, second_pass_s = _instants_of(wall, self.zone)
            if first_pass_s > second_pass_s:  # the wall time falls in a spring-forward gap
                transition_s = _transition_between(second_pass_s, first_pass_s, self.zone)
                if self.fixed_time and transition_s > after_s:
                    return transition_s
                wall = _wall_at(transition_s, self.zone)
                continue
            if first_pass_s > after_s:
                return first_pass_s
            wall += _SECOND

    # Enumerating matching wall-clock times.

    def _next_wall(self, start: datetime) -> datetime:
        """The earliest matching wall-clock time at or after ``start`` (whole seconds)."""
        year, month, day = start.year, start.month, start.day
        floor = (start.hour, start.minute, start.second)
        if month not in self.months:
            (year, month), day, floor = self._month_after(year, month), 1, _MIDNIGHT
        for _ in range(_MAX_MONTHS_SEARCHED):
            found = self._next_wall_in_month(year, month, day, floor)
            if found is not None:
                return found
            (year, month), day, floor = self._month_after(year, month), 1, _MIDNIGHT
        raise CronNeverFires(f"'{self.expression}' never fires", field="expression")

    def _month_after(self, year: int, month: int) -> tuple[int, int]:
        index = bisect_right(self.months, month)
        if index < len(self.months):
            return year, self.months[index]
        return year + 1, self.months[0]

    def _next_wall_in_month(
        self, year: int, month: int, day: int, floor: tuple[int, int, int]
    ) -> datetime | None:
        while True:
            matching_day = self._first_matching_day(year, month, day)
            if matching_day is None:
                return None
            if matching_day != day:
                floor = _MIDNIGHT
            time_of_day = self._next_time_of_day(floor)
            if time_of_day is not None:
                return datetime(year, month, matching_day, *time_of_day)
            day, floor = matching_day + 1, _MIDNIGHT

    def _first_matching_day(self, year: int, month: int, from_day: int) -> int | None:
        last_day = calendar.monthrange(year, month)[1]
        if from_day > last_day:
            return None
        month_days = self.days_of_month
        if self.month_day_rules:
            month_days = month_days | rule_days(self.month_day_rules, year, month)
        week_days = rule_days(self.week_day_rules, year, month) if self.week_day_rules else ()
        weekday = (date(year, month, from_day).weekday() + 1) % 7  # cron counts Sunday as 0
        for day in range(from_day, last_day + 1):
            in_month = day in month_days
            in_week = weekday in self.days_of_week or day in week_days
            if (in_month or in_week) if self.days_either else (in_month and in_week):
                return day
            weekday = (weekday + 1) % 7
        return None

    def _next_time_of_day(self, floor: tuple[int, int, int]) -> tuple[int, int, int] | None:
        """The earliest matching (hour, minute, second) at or after ``floor`` on a matching day."""
        hour, minute, second = floor
        hour_index = bisect_left(self.hours, hour)
        if hour_index < len(self.hours) and self.hours[hour_index] == hour:
            minute_index = bisect_left(self.minutes, minute)
            if minute_index < len(self.minutes) and self.minutes[minute_index] == minute:
                second_index = bisect_left(self.seconds, second)
                if second_index < len(self.seconds):
                    return hour, minute, self.seconds[second_index]
                minute_index += 1
            if minute_index < len(self.minutes):
                return hour, self.minutes[minute_index], self.seconds[0]
            hour_index += 1
        if hour_index < len(self.hours):
            return self.hours[hour_index], self.minutes[0], self.seconds[0]
        return None


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def parse_cron(expression: str, timezone: str = "UTC", hash_key: str = "") -> CronSchedule:
    """Validate a cron expression and time zone and return the schedule they describe.

    ``hash_key`` is what ``H`` is hashed from: the job's id (see
    :func:`scheduler.schedules.hash_key_of`); an expression without ``H`` ignores it.
    Raises InvalidCronExpression (bad syntax or value), CronNeverFires (valid but impossible,
    such as the 30th of February) or UnknownTimeZone, each naming the field at fault.
    Results are cached: beat parses the same expression for every occurrence it dispatches.
    """
    tokens = [token for token in _FIELD_SEPARATOR.split(str(expression)) if token]
    if not all(token.isascii() for token in tokens):
        raise _not_ascii(tokens)
    normalised = " ".join(tokens)
    expanded = _expand_macro(normalised)
    tokens = expanded.split(" ") if expanded else []
    fields = _fields_for(tokens)
    if len(fields) == 5:
        tokens = ["0", *tokens]
        fields = _SIX_FIELDS
    hashed = any(cron_extensions.has_hash(token) for token in tokens)
    resolved = [cron_extensions.resolve_hashes(token, spec, hash_key) if hashed else token
                for token, spec in zip(tokens, fields, strict=True)]
    days_either = not (_is_unrestricted(tokens[3]) or _is_unrestricted(tokens[5]))
    month_rules, week_rules = _day_rules(resolved, days_either)
    values = [
        () if (index == 3 and month_rules) or (index == 5 and week_rules)
        else _parse_field(token, spec)
        for index, (token, spec) in enumerate(zip(resolved, fields, strict=True))
    ]
    seconds, minutes, hours, days_of_month, months, days_of_week = values
    if not month_rules:
        _check_days_exist(days_of_month, months, days_either)
    schedule = CronSchedule(
        expression=normalised,
        timezone=timezone,
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days_of_month=frozenset(days_of_month if not month_rules else ()),
        months=months,
        days_of_week=frozenset(0 if value == 7 else value for value in days_of_week),
        days_either=days_either,
        # Debian's entry.c: only a minute or hour field that begins with '*' is a wildcard.
        fixed_time=not (tokens[1].startswith("*") or tokens[2].startswith("*")),
        month_day_rules=month_rules,
        week_day_rules=week_rules,
        hash_key=hash_key if hashed else "",
        hashed=hashed,
    )
    if month_rules or week_rules:
        _check_rules_fire(schedule)
    return schedule


def _day_rules(tokens: list[str], days_either: bool
               ) -> tuple[tuple[DayRule, ...], tuple[DayRule, ...]]:
    """The L/W rule of day-of-month and the L/# rule of day-of-week, when they use one."""
    month_token, week_token = tokens[3], tokens[5]
    month_rule = cron_extensions.uses_day_rule(month_token)
    week_rule = cron_extensions.uses_day_rule(week_token)
    if (month_rule or week_rule) and days_either:
        spec, token = ((_DAY_OF_MONTH_FIELD, month_token) if month_rule
                       else (_DAY_OF_WEEK_FIELD, week_token))
        raise _invalid(spec, token, "uses L, W or # while the other day field is restricted "
                       "too; Quartz refuses both day fields together (which day would be "
                       "meant is a guess), so set the other one to * or ?")
    month_rules = ((cron_extensions.parse_day_of_month_rule(month_token, _DAY_OF_MONTH_FIELD),)
                   if month_rule else ())
    week_rules = ((cron_extensions.parse_day_of_week_rule(week_token, _DAY_OF_WEEK_FIELD),)
                  if week_rule else ())
    return month_rules, week_rules


def _check_rules_fire(schedule: CronSchedule) -> None:
    """Refuse a day rule that no month of the schedule ever has (``30W`` in February alone)."""
    try:
        schedule._next_wall(datetime(2000, 1, 1))
    except CronNeverFires:
        raise CronNeverFires(
            f"'{schedule.expression}' selects a day that none of its months has, so it never "
            "fires; choose a day rule its months have, or add a month", field="day_of_month",
        ) from None


def validate_timezone(name: str) -> zoneinfo.ZoneInfo:
    """Return the IANA time zone called ``name``; raise UnknownTimeZone if there is none."""
    if isinstance(name, str) and name not in _HOST_ZONE_NAMES:
        try:
            return zoneinfo.ZoneInfo(name)
        # Not found, a malformed or absolute key, a directory such as "Europe", or a file in the
        # tz database that is not a zone ("zone1970.tab").
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise UnknownTimeZone(_unknown_zone_message(name), field="timezone")


def format_fire_time(fire_ms: int, timezone: str) -> str:
    """A fire time as ISO 8601 local time with its UTC offset: ``2026-03-08T03:00:00-04:00``."""
    local = datetime.fromtimestamp(operator.index(fire_ms) // 1000, validate_timezone(timezone))
    return local.isoformat(timespec="seconds")


# Parsing helpers.


def _expand_macro(expression: str) -> str:
    if not expression.startswith("@"):
        return expression
    macro, _, rest = expression.partition(" ")
    if macro.lower() not in MACROS:
        raise InvalidCronExpression(
            f"unknown macro '{macro}'; use one of {', '.join(MACROS)}", field="expression"
        )
    if rest:
        raise InvalidCronExpression(
            f"macro '{macro}' must be the whole expression, found '{expression}'",
            field="expression",
        )
    return MACROS[macro.lower()]


def _not_ascii(tokens: list[str]) -> InvalidCronExpression:
    """The error of the first token holding a character that is not ASCII, naming its field
    when the expression has a field count that says which field that is."""
    index, token = next((i, t) for i, t in enumerate(tokens) if not t.isascii())
    char = next(c for c in token if not c.isascii())
    described = f"'{char}' (U+{ord(char):04X} {unicodedata.name(char, 'unnamed character')})"
    if char.isspace():
        return InvalidCronExpression(
            f"'{token}' uses {described}, a space that is not ASCII; separate the fields with "
            "ordinary spaces", field="expression")
    problem = (f"uses {described}, which is not ASCII; write numbers with the digits 0-9 and "
               "names in English letters")
    fields = {5: _FIVE_FIELDS, 6: _SIX_FIELDS}.get(len(tokens))
    if fields is None:
        return InvalidCronExpression(f"'{token}' {problem}", field="expression")
    return _invalid(fields[index], token, problem)


def _fields_for(tokens: list[str]) -> tuple[_Field, ...]:
    if len(tokens) == 5:
        return _FIVE_FIELDS
    if len(tokens) == 6:
        return _SIX_FIELDS
    raise InvalidCronExpression(f"{_FIELD_COUNT_HINT}, got {len(tokens)}", field="expression")


def _is_unrestricted(day_token: str) -> bool:
    """Vixie cron treats a day field starting with ``*`` (``*``, ``*/2``) as unrestricted."""
    return day_token.startswith("*") or day_token == "?"


def _parse_field(token: str, spec: _Field) -> tuple[int, ...]:
    if token == "?" and spec in _DAY_FIELDS:
        token = "*"
    values: set[int] = set()
    for item in token.split(","):
        values.update(_parse_item(item, token, spec))
    return tuple(sorted(values))


def _parse_item(item: str, token: str, spec: _Field) -> range:
    if not item:
        raise _invalid(spec, token, "has an empty list item; remove the extra comma")
    base, slash, step_text = item.partition("/")
    step = _parse_step(step_text, item, spec) if slash else 1
    if base == "*":
        return range(spec.low, _star_high(spec) + 1, step)
    low_text, dash, high_text = base.partition("-")
    low = _parse_value(low_text, item, spec)
    if not dash:
        return range(low, (_star_high(spec) if slash else low) + 1, step)
    high = _parse_value(high_text, item, spec)
    if spec is _DAY_OF_WEEK_FIELD and high == 0 < low:
        high = 7  # "sat-sun" and "5-0" run up to Sunday at the end of the week
    if low > high:
        wrapped = f"{low}-{_star_high(spec)},{spec.low}-{high}"
        raise _invalid(
            spec, item, f"is a reversed range; write {wrapped} to wrap around, or {high}-{low}"
        )
    return range(low, high + 1, step)


def _star_high(spec: _Field) -> int:
    """Largest value ``*`` covers: day-of-week 7 is only an alias for Sunday (0)."""
    return 6 if spec is _DAY_OF_WEEK_FIELD else spec.high


def _parse_step(step_text: str, item: str, spec: _Field) -> int:
    largest = _star_high(spec)
    if not (step_text.isascii() and step_text.isdigit()) or not 1 <= int(step_text) <= largest:
        raise _invalid(
            spec, item, f"has step '{step_text}'; use a whole number from 1 to {largest}"
        )
    return int(step_text)


def _parse_value(text: str, item: str, spec: _Field) -> int:
    value = spec.value_of(text)
    if value is None:
        raise _invalid(spec, item, _how_to_write(text, spec))
    if not spec.low <= value <= spec.high:
        raise _invalid(spec, item, f"is out of range {spec.low}-{spec.high}")
    return value


def _how_to_write(text: str, spec: _Field) -> str:
    if text == "?":
        return "uses '?', which only day-of-month and day-of-week accept on their own"
    if "#" in text or any(char in text.upper() for char in "LWH"):
        return ("uses L, W, # or H where it does not belong: L, LW, L-n and nW go in "
                "day-of-month, dL and d#k in day-of-week, H, H/n, H(a-b) and H(a-b)/n anywhere")
    names = f" or a name {spec.names[0]}-{spec.names[-1]}" if spec.names else ""
    return (
        f"is not valid; use a number {spec.low}-{spec.high}{names}, a range such as 1-5, "
        "a step such as */15, or a comma-separated list of these"
    )


def _invalid(spec: _Field, item: str, problem: str) -> InvalidCronExpression:
    return InvalidCronExpression(f"{spec.label} field '{item}' {problem}", field=spec.name)


def _check_days_exist(
    days_of_month: tuple[int, ...], months: tuple[int, ...], days_either: bool
) -> None:
    """Reject a schedule whose days of month fall in none of its months, e.g. 30 February.

    With the Vixie OR rule the weekday alone can match, and an unrestricted day-of-month
    (``*/n``) always contains the 1st, so only a plain day-of-month list can be impossible.
    """
    longest = max(_MOST_DAYS_IN_MONTH[month - 1] for month in months)
    if days_either or days_of_month[0] <= longest:
        return
    days = ",".join(str(day) for day in days_of_month)
    month_names = [_MONTH_NAMES[month - 1] for month in months]
    in_months = (
        ", ".join(month_names[:-1]) + " or " + month_names[-1]
        if len(month_names) > 1
        else month_names[0]
    )
    raise CronNeverFires(
        f"day-of-month {days} never occurs in {in_months}, so this schedule never fires; "
        f"choose a day from 1 to {longest} or add a month that has it",
        field="day_of_month",
    )


def _unknown_zone_message(name: object) -> str:
    message = f"unknown time zone '{name}'; use an IANA name such as 'Europe/Paris'"
    suggestion = _closest_zone_name(name) if isinstance(name, str) else None
    return f"{message} (did you mean '{suggestion}'?)" if suggestion else message


@functools.lru_cache(maxsize=1)
def _zone_names_by_lowercase() -> dict[str, str]:
    # Walking the tz database costs milliseconds, so it happens once and only on the error path.
    names = zoneinfo.available_timezones() - _HOST_ZONE_NAMES
    return {name.lower(): name for name in names}


def _closest_zone_name(name: str) -> str | None:
    by_lowercase = _zone_names_by_lowercase()
    close = difflib.get_close_matches(name.lower(), by_lowercase, n=1, cutoff=0.8)
    return by_lowercase[close[0]] if close else None


# Time-zone helpers: walls are naive datetimes, instants are UTC epoch seconds.


def _wall_at(instant_s: int, zone: zoneinfo.ZoneInfo) -> datetime:
    """The wall-clock time of an instant, as a naive datetime."""
    return datetime.fromtimestamp(instant_s, zone).replace(tzinfo=None, fold=0)


def _instants_of(wall: datetime, zone: zoneinfo.ZoneInfo) -> tuple[int, int]:
    """The instants a wall time denotes read with fold=0 and with fold=1.

    Equal for an ordinary wall time; increasing for one that repeats (the first and second
    occurrence); decreasing for one in a spring-forward gap (zoneinfo then reads fold=0 with the
    offset from before the gap, so the transition lies between the two, after the second).
    """
    naive_s = (wall - _EPOCH) // _SECOND
    first = naive_s - _offset_s(wall.replace(tzinfo=zone, fold=0))
    second = naive_s - _offset_s(wall.replace(tzinfo=zone, fold=1))
    return first, second


def _offset_s(aware: datetime) -> int:
    offset = aware.utcoffset()
    assert offset is not None  # a ZoneInfo always knows its offset
    return offset // _SECOND


def _transition_between(before_s: int, after_s: int, zone: zoneinfo.ZoneInfo) -> int:
    """The instant in (before_s, after_s] at which the UTC offset changes (a binary search).

    Runs only near a DST transition, a few times a year per schedule, so zoneinfo's private
    transition table is not worth depending on.
    """
    target = _offset_s(datetime.fromtimestamp(after_s, zone))
    while after_s - before_s > 1:
        middle = (before_s + after_s) // 2
        if _offset_s(datetime.fromtimestamp(middle, zone)) == target:
            after_s = middle
        else:
            before_s = middle
    return after_s
