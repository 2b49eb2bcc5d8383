"""The audit outbox: one row per state change, written in the transaction that made the change.

``chrono indexer`` ships unshipped rows, in id order, to the audit data stream (the row id is the
document ``_id``) and then sets ``shipped_at``. The partial index on unshipped ids keeps that scan
cheap however large the table grows; shipped rows are deleted ``audit_outbox_keep_hours`` after
shipping. No foreign keys: a deleted job or tenant keeps its history, and the hot paths (beat,
workers) pay no constraint check for their audit rows.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models


class AuditEvent(models.Model):
    """One state change: what happened (``action``), to what, by whom, and when."""

    id = models.BigAutoField(primary_key=True)
    # Null for platform events (a worker up or down) that belong to no tenant.
    tenant_id = models.UUIDField(null=True, blank=True)
    occurred_at = models.DateTimeField()
    action = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16)
    job_id = models.UUIDField(null=True, blank=True)
    execution_id = models.UUIDField(null=True, blank=True)
    # A user ("user:<name>"), an API key ("api-key:<prefix>"), "beat", "worker:<id>", "reaper"
    # or "system".
    actor = models.CharField(max_length=200, blank=True, default="")
    # Empty for most events: the indexer writes the message from the action and the fields.
    message = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    shipped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["id"],
                name="auditevent_unshipped_idx",
                condition=models.Q(shipped_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.action} {self.job_id or self.execution_id or ''}".rstrip()


class IndexerState(models.Model):
    """What the indexer of one data stream may have sent without knowing the answer.

    Before a ``_bulk`` request the indexer adds the batch's row ids to ``in_doubt_ids``; once the
    rows are marked shipped it removes them. A restarted indexer checks rows still in doubt
    against the whole data stream before sending them again (see :mod:`search.indexer`).
    """

    data_stream = models.CharField(max_length=255, primary_key=True)
    in_doubt_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.data_stream
