"""Workers as the scheduler sees them: who is alive, on which queue, heard from when."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models


class WorkerState(models.TextChoices):
    """What became of a worker, as the dashboard, the admin, the API and the metrics show it."""

    UP = "up", "up"
    # Its warm shutdown ended with a final heartbeat: a deploy, a scale-down, Ctrl-C.
    STOPPED = "stopped", "stopped"
    # It stopped heartbeating without a final heartbeat (killed, out of memory, its host gone);
    # the reaper marks it down and declares its running executions lost.
    LOST = "lost", "lost"


class Worker(models.Model):
    """A Celery worker process running Chrono's integration; it heartbeats every few seconds.

    ``is_healthy`` is false once the worker is gone, whichever way; ``stopped_at`` tells a
    worker that stopped cleanly (its final heartbeat) from one that was lost, so that a
    rolling deploy does not look like a fleet of dead workers."""

    worker_id = models.CharField(max_length=200, primary_key=True)
    queue_name = models.CharField(max_length=500)
    hostname = models.CharField(max_length=200, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat_at = models.DateTimeField()
    is_healthy = models.BooleanField(default=True)
    stopped_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the worker stopped cleanly (its final heartbeat); empty while it runs "
        "and for a worker that was lost.")

    class Meta:
        db_table = "chrono_worker"
        indexes = [models.Index(fields=["last_heartbeat_at"], name="worker_last_heartbeat_idx")]

    def __str__(self) -> str:
        return self.worker_id

    def state(self, *, now: datetime | None = None,
              silent_after: timedelta | None = None) -> WorkerState:
        """Up, stopped or lost, from the row's flags (lost once the reaper marked it down);
        given ``now`` and ``silent_after``, a worker not heard from for that long counts as
        lost before the reaper marks it."""
        if self.stopped_at is not None:
            return WorkerState.STOPPED
        if not self.is_healthy:
            return WorkerState.LOST
        if now is not None and silent_after is not None and (
                now - self.last_heartbeat_at >= silent_after):
            return WorkerState.LOST
        return WorkerState.UP
