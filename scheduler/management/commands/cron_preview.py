"""``chrono cron-preview EXPR --timezone TZ --count N [--after ISO] [--hash-key JOB_ID]
[--explain]``: the next fire times, one ISO 8601 time with its offset per line.

Around a DST transition a line says why its time was chosen (``# after the gap``: a wall time
the clocks skipped fired at the first instant after; ``# repeated hour: once``: a wall time that
happened twice fired at its first pass only; ``# repeated hour: first pass`` / ``second pass``
for a wildcard job, which fires at both). ``H`` is hashed from ``--hash-key``, the job's id
(:mod:`scheduler.schedules`), so the times are those job's; without it, from an empty key, and a
note on stderr says so. ``--explain`` prints the expression in words first.
"""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from scheduler.clock import datetime_to_ms, now_ms
from scheduler.cron import format_fire_time, parse_cron
from scheduler.cron_words import explain
from scheduler.errors import InvalidSchedule


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

    def handle(self, expression, timezone, count, after, hash_key, explain, **options):  # noqa: PLR0913
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
        after_ms = now_ms() if after is None else _parse_after(after)
        for fire_ms in schedule.fire_times_ms(after_ms, count):
            line = format_fire_time(fire_ms, timezone)
            if note := schedule.dst_note(fire_ms):
                line += f"  # {note}"
            self.stdout.write(line)


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
