"""Workers as the scheduler sees them: who is alive, on which queue, heard from when."""

from __future__ import annotations

from django.db import models


class Worker(models.Model):
    """A Celery worker process running Chrono's integration; it heartbeats every few seconds."""

    worker_id = models.CharField(max_length=200, primary_key=True)
    queue_name = models.CharField(max_length=500)
    hostname = models.CharField(max_length=200, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat_at = models.DateTimeField()
    is_healthy = models.BooleanField(default=True)

    class Meta:
        db_table = "chrono_worker"
        indexes = [models.Index(fields=["last_heartbeat_at"], name="worker_last_heartbeat_idx")]

    def __str__(self) -> str:
        return self.worker_id
