"""``chrono reaper``: re-queue what dead workers left behind (safe to run several)."""

from __future__ import annotations

import logging
import signal

from django.core.management.base import BaseCommand

from chronocore.config import get_config
from reaper.reaper import Reaper
from scheduler.api import timer_store
from scheduler.dispatch import Publisher


class Command(BaseCommand):
    help = "Detect dead workers and expired execution leases; send their jobs again."

    def handle(self, *args, **options):
        logging.getLogger("chrono").setLevel(logging.INFO)
        config = get_config()
        reaper = Reaper(config=config, store=timer_store(),
                        publisher=Publisher(config.broker_url, origin="chrono-reaper"))
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: reaper.stop())
        reaper.run()
