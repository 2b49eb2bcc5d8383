"""Celery beat schedules as Chrono jobs: the translation of one ``beat_schedule`` entry.

Pure functions (no app, no database): ``chrono import-beat`` reads the app and writes the jobs.

A ``crontab`` is evaluated in the app's time zone (``app.conf.timezone``), as beat does, and keeps
it. Its fields are read as the sets of values Celery expanded them to, so every spelling Celery
accepts comes out as plain cron. One difference cannot be translated: when both ``day_of_month``
and ``day_of_week`` are restricted, Celery fires on days that match both, while cron (Chrono's
included) fires on days that match either; such an entry is refused.

An interval (a number of seconds, a ``timedelta`` or ``schedule(run_every=…)``) becomes a Chrono
interval job (:mod:`scheduler.intervals`): elapsed time, so no daylight-saving change stretches or
shrinks a period, and any period from a second to 366 days (every 45 minutes, every 7 seconds,
every 2 days) translates. Beat counts an interval from its own start; Chrono from the job's
creation, kept across syncs. :func:`cron_for_interval` is the older, clock-aligned translation
(an interval that divides a minute, an hour or a day), kept for callers that want a cron.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from celery.schedules import crontab
from celery.schedules import schedule as interval_schedule

from scheduler.cron import parse_cron, validate_timezone
from scheduler.errors import InvalidSchedule, UntranslatableSchedule
from scheduler.intervals import period_problem

MINUTE_S = 60
HOUR_S = 3_600
DAY_S = 86_400
WEEK_S = 7 * DAY_S
INTERVAL_TIMEZONE = "UTC"
# Entry options Chrono applies; any other is reported as ignored.
APPLIED_OPTIONS = frozenset({"queue"})


@dataclass(frozen=True)
class CronTranslation:
    """A cron expression (or an interval, ``cron`` None), the time zone, and how it was
    derived."""

    cron: str | None
    timezone: str
    note: str
    interval_ms: int | None = None


@dataclass(frozen=True)
class BeatEntry:
    """One ``beat_schedule`` entry, translated: everything a Chrono cron job needs."""

    name: str
    task_name: str
    cron: str | None
    timezone: str
    note: str
    interval_ms: int | None = None
    args: tuple[object, ...] = ()
    kwargs: dict[str, object] = field(default_factory=dict)
    queue: str | None = None
    ignored_options: tuple[str, ...] = ()


def translate_entry(
    name: str,
    entry: Mapping[str, object],
    *,
    app_timezone: str,
    routed_queue: str | None = None,
) -> BeatEntry:
    """Translate the entry ``name`` of a ``beat_schedule``. ``routed_queue`` is the queue the
    app's ``task_routes`` send its task to, used when the entry's options name none.
    Raises :class:`UntranslatableSchedule` saying what to change."""
    if not isinstance(entry, Mapping):
        raise UntranslatableSchedule(f"the entry is a {type(entry).__name__}, not a dict")
    task_name = entry.get("task")
    if not isinstance(task_name, str) or not task_name:
        raise UntranslatableSchedule("the entry has no 'task' (the name of the task to run)")
    if "schedule" not in entry:
        raise UntranslatableSchedule("the entry has no 'schedule'")
    args = entry.get("args") or ()
    if not isinstance(args, list | tuple):
        raise UntranslatableSchedule(f"'args' is a {type(args).__name__}; use a list or tuple")
    kwargs = entry.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise UntranslatableSchedule(f"'kwargs' is a {type(kwargs).__name__}; use a dict")
    options = entry.get("options") or {}
    if not isinstance(options, Mapping):
        raise UntranslatableSchedule(f"'options' is a {type(options).__name__}; use a dict")
    translation = translate_schedule(entry["schedule"], app_timezone=app_timezone)
    return BeatEntry(
        name=name,
        task_name=task_name,
        cron=translation.cron,
        timezone=translation.timezone,
        note=translation.note,
        interval_ms=translation.interval_ms,
        args=tuple(args),
        kwargs=dict(kwargs),
        queue=options.get("queue") or routed_queue or None,
        ignored_options=tuple(sorted(set(options) - APPLIED_OPTIONS)),
    )


def translate_schedule(schedule: object, *, app_timezone: str) -> CronTranslation:
    """The cron form of a beat schedule: a ``crontab``, an interval (number of seconds,
    ``timedelta``, ``schedule``). Raises :class:`UntranslatableSchedule` for anything else."""
    if isinstance(schedule, crontab):
        validate_timezone(app_timezone)
        cron = cron_for_crontab(schedule)
        return CronTranslation(
            _checked(cron, app_timezone), app_timezone, f"crontab in {app_timezone}"
        )
    if isinstance(schedule, interval_schedule):
        seconds = schedule.run_every.total_seconds()
    elif isinstance(schedule, timedelta):
        seconds = schedule.total_seconds()
    elif isinstance(schedule, int | float) and not isinstance(schedule, bool):
        seconds = float(schedule)
    else:
        kind = type(schedule).__name__
        if kind == "solar":
            why = "solar schedules (sunrise, sunset …) have no cron equivalent"
        else:
            why = f"a {kind} schedule is not one Chrono can read (crontab or an interval)"
        raise UntranslatableSchedule(
            f"{why}; rewrite the entry with a crontab, or schedule it with scheduler.api"
        )
    return CronTranslation(None, INTERVAL_TIMEZONE,
                           f"every {describe_seconds(seconds)} of elapsed time",
                           interval_ms=interval_ms_for(seconds))


def interval_ms_for(seconds: float) -> int:
    """An interval of ``seconds`` as an interval job's period in milliseconds.
    Raises :class:`UntranslatableSchedule` outside a second to 366 days."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise UntranslatableSchedule(f"the interval is {seconds} s; use a positive interval")
    period_ms = round(seconds * 1000)
    if problem := period_problem(period_ms):
        raise UntranslatableSchedule(f"every {describe_seconds(seconds)}: {problem}")
    return period_ms


def cron_for_interval(seconds: float) -> str:
    """The cron expression firing exactly every ``seconds``, aligned to the clock.
    Raises :class:`UntranslatableSchedule` when there is none, saying what to use instead."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise UntranslatableSchedule(f"the interval is {seconds} s; use a positive interval")
    if seconds != int(seconds):
        raise UntranslatableSchedule(
            f"every {seconds} s is not a whole number of seconds, and cron fires on whole "
            "seconds; use an interval that divides a minute (1, 2, 3, 4, 5, 6, 10, 12, 15, 20 or "
            "30 s)"
        )
    s = int(seconds)
    if s < MINUTE_S:
        if MINUTE_S % s:
            raise UntranslatableSchedule(
                f"every {s} s does not divide a minute, so no cron fires at exactly that "
                "interval; use one that does (1, 2, 3, 4, 5, 6, 10, 12, 15, 20 or 30 s) or a "
                "crontab"
            )
        return "* * * * * *" if s == 1 else f"*/{s} * * * * *"
    if s < HOUR_S:
        minutes, rest = divmod(s, MINUTE_S)
        if rest or HOUR_S % s:
            raise UntranslatableSchedule(
                f"every {describe_seconds(s)} does not divide an hour, so no cron fires at exactly "
                "that interval; use one that does (1, 2, 3, 4, 5, 6, 10, 12, 15, 20 or 30 min) or "
                "a crontab"
            )
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if s < DAY_S:
        hours, rest = divmod(s, HOUR_S)
        if rest or DAY_S % s:
            raise UntranslatableSchedule(
                f"every {describe_seconds(s)} does not divide a day, so no cron fires at exactly "
                "that interval; use one that does (1, 2, 3, 4, 6, 8 or 12 h) or a crontab"
            )
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    if s == DAY_S:
        return "0 0 * * *"
    if s == WEEK_S:
        return "0 0 * * 0"
    raise UntranslatableSchedule(
        f"every {describe_seconds(s)} has no exact cron form (months differ in length, so "
        "'every n days' drifts at each month's end); use one day, one week, or a crontab with "
        "the days spelled out (e.g. crontab(minute=0, hour=0, day_of_month='1,15'))"
    )


def cron_for_crontab(schedule: crontab) -> str:
    """The five-field cron expression of a Celery ``crontab``.
    Raises :class:`UntranslatableSchedule` when both day fields are restricted."""
    day_of_month = _cron_field(schedule.day_of_month, 1, 31)
    day_of_week = _cron_field(schedule.day_of_week, 0, 6)
    if day_of_month != "*" and day_of_week != "*":
        raise UntranslatableSchedule(
            f"both day_of_month ({day_of_month}) and day_of_week ({day_of_week}) are restricted: "
            "Celery fires on days matching both, cron on days matching either; restrict only "
            "one of them (and check the other inside the task), or schedule it with scheduler.api"
        )
    return " ".join((
        _cron_field(schedule.minute, 0, 59),
        _cron_field(schedule.hour, 0, 23),
        day_of_month,
        _cron_field(schedule.month_of_year, 1, 12),
        day_of_week,
    ))


def describe_seconds(seconds: float) -> str:
    """``30 s``, ``15 min``, ``6 h``, ``2 days`` — the largest unit that divides it."""
    if seconds != int(seconds):
        return f"{seconds} s"
    s = int(seconds)
    for unit, name in ((DAY_S, " days"), (HOUR_S, " h"), (MINUTE_S, " min")):
        if s >= unit and s % unit == 0:
            count = s // unit
            return "1 day" if name == " days" and count == 1 else f"{count}{name}"
    return f"{s} s"


def _cron_field(values: Iterable[int], low: int, high: int) -> str:
    """A set of field values as compact cron: ``*``, ``*/n``, ``a-b/n``, or ranges and single
    values."""
    ordered = sorted(set(values))
    if ordered == list(range(low, high + 1)):
        return "*"
    step = ordered[1] - ordered[0] if len(ordered) > 2 else 0
    if step > 1 and ordered == list(range(ordered[0], ordered[-1] + 1, step)):
        if ordered == list(range(low, high + 1, step)):
            return f"*/{step}"
        return f"{ordered[0]}-{ordered[-1]}/{step}"
    parts: list[str] = []
    start = previous = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        if previous - start >= 2:
            parts.append(f"{start}-{previous}")
        else:
            parts.extend(str(v) for v in range(start, previous + 1))
        if value is not None:
            start = previous = value
    return ",".join(parts)


def _checked(cron: str, timezone: str) -> str:
    """``cron`` as Chrono normalises it; a translation Chrono cannot parse is a bug here, but
    it is reported as the entry's problem rather than crashing the whole import."""
    try:
        return parse_cron(cron, timezone).expression
    except InvalidSchedule as exc:
        raise UntranslatableSchedule(
            f"translated to {cron!r}, which Chrono refuses: {exc}"
        ) from None
