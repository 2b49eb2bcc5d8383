"""``chrono rebuild-timers``: write every pending job's timer to Redis from PostgreSQL."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from scheduler.reconcile import timed_rebuild
from scheduler.timers import timer_store


class Command(BaseCommand):
    help = "Rebuild the Redis timer store from the jobs table (after a Redis loss, or to check)."

    def handle(self, *args, **options):
        written, seconds = timed_rebuild(timer_store())
        self.stdout.write(f"wrote {written} timers in {seconds:.1f} s")
