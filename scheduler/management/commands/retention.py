"""``chrono retention``: one retention pass by hand (:func:`scheduler.retention.run_retention`):
partitions of the executions table created ahead, expired days dropped once shipped, shipped
audit outbox rows deleted, and, on an engine without a lifecycle of its own, the audit and
execution-log streams rolled over and their expired indices deleted. ``--dry-run`` says what it
would do and changes nothing."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from chronocore.config import get_config
from scheduler.errors import PartitioningMissing
from scheduler.retention import run_retention


class Command(BaseCommand):
    help = ("Create the executions table's daily partitions ahead, drop the days older than "
            "CHRONO_EXECUTION_RETENTION_DAYS whose executions are finished and whose audit "
            "events are shipped, delete shipped audit outbox rows and, where the search engine "
            "has no lifecycle plugin, roll the audit and execution-log streams over and delete "
            "their expired indices (the reaper does this every CHRONO_RETENTION_INTERVAL_MS).")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true",
                            help="print what would be created, dropped and deleted; change "
                                 "nothing")
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="print the report as JSON")

    def handle(self, *args, dry_run=False, as_json=False, **options):
        try:
            report = run_retention(get_config(), dry_run=dry_run)
        except PartitioningMissing as exc:
            raise CommandError(str(exc)) from None
        if as_json:
            self.stdout.write(json.dumps(report.as_dict(), default=str))
        else:
            for line in report.lines():
                self.stdout.write(line)
        if report.failed:
            raise CommandError(f"{len(report.failed)} partitions could not be changed (see "
                               "above); the next pass tries again")
        if report.streams_failed:
            raise CommandError(f"{len(report.streams_failed)} data streams could not be "
                               "changed (see above); the next pass tries again")
