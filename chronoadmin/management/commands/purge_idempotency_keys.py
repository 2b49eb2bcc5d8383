"""``chrono purge-idempotency-keys``: delete Idempotency-Key records past their 24 h retention.

Expired records are already ignored when a key comes back; this only reclaims their rows. The
retention pass (the reaper's, hourly) deletes them too; this does it now, by hand.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from chronoadmin.api.idempotency import purge_expired


class Command(BaseCommand):
    help = "Delete Idempotency-Key records older than CHRONO_IDEMPOTENCY_TTL_S (24 h)."

    def handle(self, **options):
        self.stdout.write(f"deleted {purge_expired()} expired idempotency records")
