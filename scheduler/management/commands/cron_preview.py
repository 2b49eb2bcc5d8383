"""``chrono cron-preview EXPR --timezone TZ --count N [--after ISO] [--hash-key JOB_ID]
[--explain] [--calendar FILE ...]``: the next fire times, one ISO 8601 time with its offset per
line.

Around a DST transition a line says why its time was chosen (``# after the gap``: a wall time
the clocks skipped fired at the first instant after; ``# repeated hour: once``: a wall time that
happened twice fired at its first pass only; ``# repeated hour: first pass`` / ``second pass``
for a wildcard job, which fires at both). ``H`` is hashed from ``--hash-key``, the job's id
(:mod:`scheduler.schedules`), so the times are those job's; without it, from an empty key, and a
note on stderr says so. ``--explain`` prints the expression in words first.

``--calendar FILE`` (repeatable) leaves out the times an exclusion calendar excludes, as the
beat skips them: FILE is JSON, one calendar or a list of them, each as the REST API's
``/api/v1/calendars/`` takes and returns it (``{"name": "us-holidays", "timezone":
"America/New_York", "dates": ["2026-12-25"], "ranges": ["2026-12-24/2027-01-02"], "rules":
["* * SAT,SUN"]}``; :mod:`scheduler.calendars`; the fields the API adds, such as
``calendar_id``, are ignored).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduler.calendars import ExclusionCalendar, allowed_fire_times, parse_calendar
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.cron import format_fire_time, parse_cron
from scheduler.cron_words import explain
from scheduler.errors import InvalidSchedule, SpecInvalid

# Fields the REST API returns with a calendar besides the ones it takes: a calendar saved from
# GET /api/v1/calendars/{id}/ is a calendar file as it is.
_READ_ONLY_FIELDS = ("calendar_id", "created_at", "updated_at", "jobs")


class Command(BaseCommand):
    help = "Print the next N fire times of a cron expression, one ISO 8601 time per line."

    def add_arguments(self, parser):
        parser.add_argument("expression")
        parser.add_argument("--timezone", "--tz", default="UTC")
        parser.add_argument("--count", "-n", type=int, default=5)
        parser.add_argument("--after", default=None, help="ISO 8601 time with offset.")
        parser.add_argument("--hash-key", default=None,
                            help="What H is hashed from: the job's id.")
        parser.add_argument("--explain", action="store_true",
                            help="Print the expression in words first.")
        parser.add_argument("--calendar", action="append", default=[], metavar="FILE",
                            help="A JSON file of an exclusion calendar (or a list of them): "
                            "its days are left out. Repeatable.")

    def handle(self, expression, timezone, count, after, hash_key, explain, calendar,  # noqa: PLR0913
               **options):
        if count < 1 or count > 10_000:
            raise CommandError("--count must be between 1 and 10000")
        try:
            schedule = parse_cron(expression, timezone, hash_key or "")
        except InvalidSchedule as exc:
            raise CommandError(str(exc)) from None
        if schedule.hashed and hash_key is None:
            self.stderr.write("note: H is hashed from the job's id; pass --hash-key JOB_ID for "
                              "one job's times (these use an empty key)")
        if explain:
            self.stdout.write(_explain(schedule))
        calendars = [c for path in calendar for c in _read_calendars(path)]
        if explain and calendars:
            self.stdout.write("\n".join(f"# except on the days of calendar {c.name} "
                                        f"({c.timezone})" for c in calendars))
        after_ms = now_ms() if after is None else _parse_after(after)
        times = (allowed_fire_times(schedule, calendars, after_ms, count) if calendars
                 else schedule.fire_times_ms(after_ms, count))
        if len(times) < count:
            self.stderr.write(f"note: the calendars leave only {len(times)} fire time(s) in "
                              "the five years searched")
        for fire_ms in times:
            line = format_fire_time(fire_ms, timezone)
            if note := schedule.dst_note(fire_ms):
                line += f"  # {note}"
            self.stdout.write(line)


def _read_calendars(path: str) -> list[ExclusionCalendar]:
    """The calendars of a ``--calendar`` file; CommandError naming the file and the field."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"--calendar {path}: cannot read it: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CommandError(f"--calendar {path}: not JSON: {exc}") from None
    documents = document if isinstance(document, list) else [document]
    calendars = []
    for index, item in enumerate(documents):
        if isinstance(item, dict):
            item = {k: v for k, v in item.items() if k not in _READ_ONLY_FIELDS}
        try:
            calendars.append(parse_calendar(item))
        except SpecInvalid as exc:
            where = f"[{index}]" if isinstance(document, list) else ""
            problems = "; ".join(f"{field}: {' '.join(messages)}"
                                 for field, messages in exc.errors.items())
            raise CommandError(f"--calendar {path}{where}: {problems}") from None
    return calendars


def _explain(schedule) -> str:
    return "\n".join(f"# {line}" for line in explain(schedule).splitlines())


def _parse_after(text: str) -> int:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"--after {text!r} is not ISO 8601 (e.g. 2026-03-08T00:00:00-05:00)"
        ) from None
    if value.tzinfo is None:
        raise CommandError(f"--after {text!r} has no UTC offset; add one (e.g. +00:00)")
    return datetime_to_ms(value)
