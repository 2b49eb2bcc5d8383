"""When a job fires next, as the beat will fire it: shared by the REST API's ``next_fire_times``
and the admin's job page.

A cron job's first time is its pending occurrence (what its timer holds, jitter included), then
the schedule after it, each moved by the job's jitter; a triggered job shows its trigger first. A
paused, completed or cancelled job fires at no time (a paused one again only once resumed).
An occurrence one of the job's exclusion calendars excludes is left out (the beat records it
``SKIPPED``); a trigger is shown whatever the calendars say, as the beat fires it.
"""

from __future__ import annotations

from datetime import datetime

from scheduler import calendar_store
from scheduler.calendars import allowed_fire_times
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.cron import validate_timezone
from scheduler.errors import InvalidSchedule
from scheduler.misfire import jittered_ms, jittered_occurrence_ms
from scheduler.models import Job, JobStatus
from scheduler.specs import stored_schedule


def upcoming_fire_ms(job: Job, count: int) -> list[int]:
    """Up to ``count`` next fire times of an active or paused ``job``, epoch ms; none for a
    finished one."""
    if job.status in (JobStatus.COMPLETED, JobStatus.CANCELLED):
        return []
    if not job.is_recurring:
        return [] if job.next_run_at is None else [datetime_to_ms(job.next_run_at)]
    try:
        schedule = stored_schedule(job)
    except (InvalidSchedule, ValueError):  # a row written by hand; the API never stores one
        return []
    first: list[int] = []
    after = now_ms()
    if job.next_run_at is not None:
        pending_ms = datetime_to_ms(job.next_run_at)
        occurrence_ms = jittered_occurrence_ms(str(job.job_id), schedule, pending_ms,
                                               job.jitter_ms)
        if occurrence_ms is None:  # a time of its own (a trigger): shown as it is
            first, after = [pending_ms], pending_ms
        else:
            after = occurrence_ms - 1
    job_id, jitter = str(job.job_id), job.jitter_ms
    if job.calendars:
        calendars = calendar_store.calendars_of_jobs(
            [(job_id, str(job.tenant_id), job.calendars)]).get(job_id, [])
        return first + allowed_fire_times(
            schedule, calendars, after, count - len(first),
            fire_time=lambda ms: jittered_ms(job_id, ms, jitter), max_spread_ms=jitter)
    return first + [jittered_ms(job_id, ms, jitter)
                    for ms in schedule.fire_times_ms(after, count - len(first))]


def fire_time_rows(times_ms: list[int], timezone: str) -> list[dict[str, object]]:
    """Each time in UTC and in ``timezone``, with ``offset_changed`` True where the zone's UTC
    offset differs from the time before it (a DST transition lies between the two)."""
    zone = validate_timezone(timezone)
    rows: list[dict[str, object]] = []
    previous_offset = None
    for ms in times_ms:
        local = datetime.fromtimestamp(ms / 1000, zone)
        offset = local.utcoffset()
        rows.append({
            "ms": ms,
            "utc": datetime.fromtimestamp(ms / 1000, validate_timezone("UTC")),
            "local": local,
            "offset_changed": previous_offset is not None and offset != previous_offset,
        })
        previous_offset = offset
    return rows
