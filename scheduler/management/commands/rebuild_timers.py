"""``chrono rebuild-timers``: write every pending job's timer to Redis from PostgreSQL, with a
progress bar on a terminal."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from chronocore.progress import progress_bar
from scheduler.models import Job
from scheduler.reconcile import timed_rebuild
from scheduler.timers import timer_store


class Command(BaseCommand):
    help = "Rebuild the Redis timer store from the jobs table (after a Redis loss, or to check)."

    def add_arguments(self, parser):
        parser.add_argument("--no-progress", action="store_false", dest="progress",
                            help="draw no progress bar (none is drawn off a terminal anyway)")

    def handle(self, *args, progress: bool = True, **options):
        # The count reads the partial index of pending jobs, a fraction of the rebuild's time.
        total = Job.objects.pending().count() if progress else None
        with progress_bar("timers", total=total, enabled=progress) as advance:
            written, seconds = timed_rebuild(timer_store(), on_batch=advance)
        self.stdout.write(f"wrote {written} timers in {seconds:.1f} s")
