"""The PostgreSQL side of exclusion calendars: a tenant's calendars read, written, deleted and
looked up for jobs (the pure rules are :mod:`scheduler.calendars`).

Every look-up is scoped by tenant: a job names calendars by name, and a name another tenant
uses is unknown to it, with the same answer as a name nobody uses. A calendar that jobs name is
neither deleted nor renamed (the answer counts the jobs: detach them first, with a PATCH of their
``calendars``); a change of its days that would leave one of its jobs without any occurrence in
five years is refused, naming the job. Jobs read their calendars when they are planned (the
beat, one statement per claimed batch that has any), so a change of days takes effect at the
next occurrence, with no job rewritten.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence

from django.db import IntegrityError, transaction

from scheduler.calendars import (
    ExclusionCalendar,
    calendar_problems,
    never_fires_problem,
    parse_calendar,
)
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.errors import CalendarInUse, InvalidJob, SpecInvalid
from scheduler.models import Calendar, Job, JobStatus
from scheduler.schedules import Schedule, job_schedule
from search import audit

log = logging.getLogger("chrono.calendars")

# Jobs of a calendar whose schedule is checked when the calendar's days change (each check is
# a few look-ups of the schedule; a larger set is checked up to this many distinct schedules).
MAX_SCHEDULES_CHECKED = 500


def to_calendar(row: Calendar) -> ExclusionCalendar:
    """The pure calendar of a row (validated when it was written), remembered by its id and
    ``updated_at`` (the beat reads the calendars of every batch that has any)."""
    key = (row.pk, row.updated_at)
    found = _parsed.get(key)
    if found is None:
        if len(_parsed) >= PARSED_KEPT:
            _parsed.clear()
        found = _parsed[key] = parse_calendar({
            "name": row.name, "timezone": row.timezone, "dates": row.dates,
            "ranges": row.ranges, "rules": row.rules})
    return found


# Parsed calendars a process keeps (a few per tenant that uses them).
PARSED_KEPT = 4_096
_parsed: dict[tuple, ExclusionCalendar] = {}


def tenant_calendars(tenant_id: uuid.UUID | str, names: Sequence[str]) -> list[ExclusionCalendar]:
    """The tenant's calendars called ``names``, in that order; raises :class:`InvalidJob`
    (field ``calendars``) naming those the tenant has not got."""
    if not names:
        return []
    rows = {row.name: row for row in Calendar.objects.for_tenant(tenant_id).filter(
        name__in=list(names))}
    missing = [name for name in names if name not in rows]
    if missing:
        raise InvalidJob(
            f"No calendar {', '.join(repr(n) for n in missing)} for this tenant; create it "
            "(POST /api/v1/calendars/) or name one of the tenant's calendars.",
            field="calendars")
    return [to_calendar(rows[name]) for name in names]


def check_job_calendars(tenant_id: uuid.UUID | str, names: Sequence[str],
                        schedule: Schedule | None, *, now_ms: int) -> None:
    """Raise :class:`InvalidJob` (field ``calendars``) unless the tenant has every calendar of
    ``names`` and they leave the job an occurrence within five years."""
    calendars = tenant_calendars(tenant_id, names)
    if schedule is not None and (problem := never_fires_problem(schedule, calendars, now_ms)):
        raise InvalidJob(problem, field="calendars")


def calendars_of_jobs(jobs: Iterable[tuple[str, str, Sequence[str]]]
                      ) -> dict[str, list[ExclusionCalendar]]:
    """For jobs ``(job id, tenant id, calendar names)``: each job's calendars, by job id, with
    one statement for all. A name that no longer resolves (the row was changed by hand) is left
    out: the occurrence is planned as if it excluded nothing."""
    jobs = [job for job in jobs if job[2]]
    if not jobs:
        return {}
    tenants = {tenant_id for _, tenant_id, _ in jobs}
    names = {name for _, _, job_names in jobs for name in job_names}
    by_key = {}
    for row in Calendar.objects.filter(tenant_id__in=tenants, name__in=names):
        try:
            by_key[(str(row.tenant_id), row.name)] = to_calendar(row)
        except (SpecInvalid, ValueError) as exc:  # a row written by hand: never the API's
            log.error("calendar %s of tenant %s cannot be read, so it excludes nothing: %s",
                      row.name, row.tenant_id, exc)
    return {job_id: [by_key[(tenant_id, n)] for n in job_names if (tenant_id, n) in by_key]
            for job_id, tenant_id, job_names in jobs}


def jobs_using(tenant_id: uuid.UUID | str, name: str) -> int:
    """How many of the tenant's jobs name the calendar ``name``."""
    return Job.objects.for_tenant(tenant_id).filter(calendars__contains=[name]).count()


def create(tenant_id: uuid.UUID | str, document: object, *, by: str = "") -> Calendar:
    """Write a new calendar for the tenant, with its ``calendar.created`` audit row; raises
    :class:`SpecInvalid` per field (``name`` when the tenant has one of that name already)."""
    calendar = parse_calendar(document)
    assert isinstance(document, Mapping)
    try:
        with transaction.atomic():
            row = Calendar.objects.create(
                tenant_id=tenant_id, description=document.get("description", ""),
                **_columns(calendar))
            record(audit.CALENDAR_CREATED, row, by=by)
            return row
    except IntegrityError:
        raise SpecInvalid({"name": [f"The tenant has a calendar '{calendar.name}' already; "
                                    "choose another name or change that one."]}) from None


def checked_change(row: Calendar, changes: object) -> tuple[ExclusionCalendar, str]:
    """The calendar ``row`` becomes with ``changes`` (any of its fields), and its description;
    raises :class:`SpecInvalid` per field (new days that would leave one of its jobs with no
    occurrence included) and :class:`CalendarInUse` for a new name while jobs name the old
    one. Writes nothing (the admin's form checks with it, :func:`update` writes)."""
    errors = calendar_problems(changes, partial=True)
    if errors:
        raise SpecInvalid(errors)
    assert isinstance(changes, Mapping)
    document = {"name": row.name, "timezone": row.timezone, "dates": row.dates,
                "ranges": row.ranges, "rules": row.rules, "description": row.description}
    document |= changes
    calendar = parse_calendar(document)
    if calendar.name != row.name and (count := jobs_using(row.tenant_id, row.name)):
        raise CalendarInUse(
            f"{count} job(s) name the calendar '{row.name}'; a new name would leave them "
            "without it. Create a calendar under the new name instead, or change the "
            "jobs' calendars first.", field="name")
    _check_jobs_still_fire(row, calendar, field=next(
        (key for key in ("dates", "ranges", "rules", "timezone") if key in changes),
        "non_field_errors"))
    return calendar, str(document["description"])


def update(row: Calendar, changes: object, *, by: str = "") -> Calendar:
    """Change a calendar (a PATCH: any of its fields), checked by :func:`checked_change`
    under the row's lock, with its ``calendar.changed`` audit row."""
    with transaction.atomic():
        row = Calendar.objects.select_for_update().get(pk=row.pk)
        calendar, row.description = checked_change(row, changes)
        for column, value in _columns(calendar).items():
            setattr(row, column, value)
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            raise SpecInvalid({"name": [f"The tenant has a calendar '{calendar.name}' "
                                        "already; choose another name."]}) from None
        record(audit.CALENDAR_CHANGED, row, by=by)
    return row


def record(action: str, row: Calendar, *, by: str = "") -> None:
    """The audit row of a calendar's creation, change or deletion (in the caller's
    transaction): its name in the message, its days in the data."""
    verb = {audit.CALENDAR_CREATED: "created", audit.CALENDAR_CHANGED: "changed",
            audit.CALENDAR_DELETED: "deleted"}[action]
    audit.record(action, tenant_id=row.tenant_id, actor=by,
                 message=f"Calendar {row.name} {verb} by {audit.current_actor(by)}",
                 data={"calendar": row.name, "timezone": row.timezone, "dates": row.dates,
                       "ranges": row.ranges, "rules": row.rules})


def columns_of(calendar: ExclusionCalendar) -> dict[str, object]:
    """The row's columns of a calendar, normalised (dates sorted, rules' spaces single)."""
    return _columns(calendar)


def delete(row: Calendar, *, by: str = "") -> None:
    """Delete a calendar no job names, with its ``calendar.deleted`` audit row; raises
    :class:`CalendarInUse` with the count of those that do (they are not detached silently:
    a job would start firing on the days it excluded)."""
    with transaction.atomic():
        row = Calendar.objects.select_for_update().get(pk=row.pk)
        if count := jobs_using(row.tenant_id, row.name):
            raise CalendarInUse(
                f"{count} job(s) name the calendar '{row.name}'; remove it from their "
                "calendars (PATCH /api/v1/jobs/{id}/ with the calendars they keep) before "
                "deleting it.", field="name")
        record(audit.CALENDAR_DELETED, row, by=by)
        row.delete()


def _columns(calendar: ExclusionCalendar) -> dict[str, object]:
    document = calendar.to_document()
    return {key: document[key] for key in ("name", "timezone", "dates", "ranges", "rules")}


def _check_jobs_still_fire(row: Calendar, calendar: ExclusionCalendar, *, field: str) -> None:
    """Refuse new days that would leave a job of this calendar with no occurrence (under
    ``field``, the first of the days' fields changed): each distinct schedule among the jobs
    is checked with all of that job's calendars, the changed one as it will be."""
    jobs = (Job.objects.for_tenant(row.tenant_id).filter(calendars__contains=[row.name])
            .exclude(status__in=[JobStatus.COMPLETED, JobStatus.CANCELLED])
            .only("job_id", "cron_expression", "timezone", "interval_ms", "interval_anchor",
                  "calendars"))
    seen: set[tuple] = set()
    others: dict[str, ExclusionCalendar] = {}
    now = now_ms()
    for job in jobs.iterator():
        key = (job.cron_expression, job.timezone, job.interval_ms, job.interval_anchor,
               tuple(job.calendars), str(job.job_id) if "H" in (job.cron_expression or "")
               else "")
        if key in seen:
            continue
        if len(seen) >= MAX_SCHEDULES_CHECKED:
            return
        seen.add(key)
        missing = [n for n in job.calendars if n != row.name and n not in others]
        if missing:
            others |= {c.name: c for c in tenant_calendars(row.tenant_id, missing)}
        calendars = [calendar if n == row.name else others[n] for n in job.calendars]
        schedule = job_schedule(
            job_id=job.job_id, cron_expression=job.cron_expression, timezone=job.timezone,
            interval_ms=job.interval_ms,
            anchor_ms=None if job.interval_anchor is None else datetime_to_ms(
                job.interval_anchor))
        if schedule is not None and (problem := never_fires_problem(schedule, calendars, now)):
            raise SpecInvalid({field: [f"Job {job.job_id}: {problem}"]})
