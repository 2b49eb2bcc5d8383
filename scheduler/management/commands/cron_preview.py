"""``chrono cron-preview EXPR --timezone TZ --count N [--after ISO]``: the next fire times."""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from scheduler.clock import datetime_to_ms, now_ms
from scheduler.cron import format_fire_time, parse_cron
from scheduler.errors import InvalidSchedule


class Command(BaseCommand):
    help = "Print the next N fire times of a cron expression, one ISO 8601 time per line."

    def add_arguments(self, parser):
        parser.add_argument("expression")
        parser.add_argument("--timezone", "--tz", default="UTC")
        parser.add_argument("--count", "-n", type=int, default=5)
        parser.add_argument("--after", default=None, help="ISO 8601 time with offset.")

    def handle(self, expression, timezone, count, after, **options):
        if count < 1 or count > 10_000:
            raise CommandError("--count must be between 1 and 10000")
        try:
            schedule = parse_cron(expression, timezone)
        except InvalidSchedule as exc:
            raise CommandError(str(exc)) from None
        after_ms = now_ms() if after is None else _parse_after(after)
        for fire_ms in schedule.fire_times_ms(after_ms, count):
            self.stdout.write(format_fire_time(fire_ms, timezone))


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
