"""``chrono beat``: run one beat replica until SIGINT/SIGTERM, then hand its shards over."""

from __future__ import annotations

import logging
import os
import signal
import socket

from django.core.management.base import BaseCommand

from chronocore.config import get_config
from chronocore.runtime import freeze_startup_heap
from scheduler.api import timer_store
from scheduler.beat import Beat
from scheduler.dispatch import Publisher


class Command(BaseCommand):
    help = "Run a beat replica: fire due timers through RabbitMQ."

    def add_arguments(self, parser):
        parser.add_argument(
            "--replica-id",
            default=None,
            help="Stable id of this replica (default: <host>-<pid>).",
        )

    def handle(self, *args, replica_id=None, **options):
        logging.getLogger("chrono").setLevel(logging.INFO)
        replica_id = replica_id or f"{socket.gethostname()}-{os.getpid()}"
        config = get_config()
        beat = Beat(
            replica_id=replica_id,
            config=config,
            store=timer_store(),
            publisher=Publisher(config.broker_url, origin=f"chrono-beat@{replica_id}"),
        )
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: beat.stop())
        freeze_startup_heap()
        beat.run()
