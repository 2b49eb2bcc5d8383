"""A job's schedule from its stored fields: a cron expression (in its time zone, ``H`` hashed
from the job's identity) or an interval; the one place that reads them back.

Pure. The *job identity* that ``H`` hashes is the job's id (a UUID given when the job is created
and never changed): it is stable across restarts, edits of every other field (name, schedule,
queue …) and beat replicas, and unique across tenants, so two tenants' jobs of one name still
spread. ``chrono cron-preview --hash-key JOB_ID`` shows one job's times. A job re-created under a
new id (deleted and declared again) gets new hashed values, as it is a new job.
"""

from __future__ import annotations

from scheduler.cron import CronSchedule, parse_cron
from scheduler.intervals import IntervalSchedule

Schedule = CronSchedule | IntervalSchedule


def hash_key_of(job_id: object) -> str:
    """The key ``H`` is hashed from for the job ``job_id``: its id as text."""
    return str(job_id)


def job_schedule(*, job_id: object, cron_expression: str | None, timezone: str,
                 interval_ms: int | None, anchor_ms: int | None) -> Schedule | None:
    """The schedule a job's fields describe; None for a one-time job. Raises what
    :func:`scheduler.cron.parse_cron` raises for a row written by hand."""
    if cron_expression:
        return parse_cron(cron_expression, timezone, hash_key_of(job_id))
    if interval_ms:
        return IntervalSchedule(interval_ms, anchor_ms or 0)
    return None
