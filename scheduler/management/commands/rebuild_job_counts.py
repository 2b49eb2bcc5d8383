"""``chrono rebuild-job-counts``: count the jobs by tenant and status again
(:func:`scheduler.job_counts.rebuild`)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from scheduler import job_counts


class Command(BaseCommand):
    help = ("Count the jobs by tenant and status again from the jobs table (the triggers keep "
            "them; this is for a database whose triggers were disabled). Holds writers back "
            "while it scans the table.")

    def handle(self, *args, **options):
        started = time.monotonic()
        rows = job_counts.rebuild()
        self.stdout.write(f"wrote {rows} job counts in {time.monotonic() - started:.1f} s")
