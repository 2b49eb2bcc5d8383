"""Retention of the worker registry: deleting workers not heard from since the pass's cutoff.

Every worker process keeps a ``chrono_worker`` row by its heartbeats; one that stopped (a
deploy, a scale-down) or was lost keeps it. Where workers are named after short-lived hosts
(containers, autoscaled machines) each start added a row that no one deleted, and the admin's
and the API's lists of workers grew by a fleet a week. The retention pass
(:mod:`scheduler.retention`, step 5) sends :data:`scheduler.retention.retention_pass`; this
module's receiver deletes the workers whose last heartbeat is older than its cutoff (the start
of the UTC day ``execution_retention_days`` ago): a worker heartbeats every few seconds, so
those are gone, and the reaper declared their executions lost long before. A worker that
comes back under the same name is registered again by its first heartbeat.
"""

from __future__ import annotations

from datetime import datetime

from django.dispatch import receiver

from reaper.models import Worker
from scheduler.retention import Deleted, RetentionReport, retention_pass

WHAT = "workers gone"


@receiver(retention_pass, sender=RetentionReport, dispatch_uid="reaper.retention")
def _on_retention_pass(*, before: datetime, dry_run: bool, **_: object) -> Deleted:
    gone = Worker.objects.filter(last_heartbeat_at__lt=before)
    if dry_run:
        return Deleted(WHAT, gone.count())
    deleted, _ = gone.delete()
    return Deleted(WHAT, deleted)
