"""``chrono demo`` schedules its one-time jobs once its worker consumes: it waits for that
worker's first heartbeat after the demo began, not an older one of an earlier demo."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chronoadmin.management.commands.demo import _worker_ready_since
from chronoadmin.management.commands.dev import DEV_WORKER_PREFIX
from reaper.models import Worker

pytestmark = pytest.mark.django_db


def heartbeat(worker_id: str, at) -> None:
    Worker.objects.update_or_create(worker_id=worker_id, defaults={
        "queue_name": "chrono", "hostname": "vm", "last_heartbeat_at": at})


def test_the_demo_worker_is_ready_once_it_beats_after_the_demo_began():
    began = timezone.now()
    heartbeat(f"{DEV_WORKER_PREFIX}vm", began + timedelta(milliseconds=5))
    assert _worker_ready_since(began, timeout_s=1)


def test_an_earlier_demo_workers_heartbeat_or_another_workers_is_not_readiness():
    began = timezone.now()
    heartbeat(f"{DEV_WORKER_PREFIX}vm", began - timedelta(minutes=3))
    heartbeat("other-worker@vm", began + timedelta(milliseconds=5))
    assert not _worker_ready_since(began, timeout_s=0.5)
