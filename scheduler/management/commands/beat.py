"""``chrono beat``: run one beat replica until SIGINT/SIGTERM, then hand its shards over."""

from __future__ import annotations

import os
import signal
import socket

from django.core.management.base import BaseCommand, CommandError

# get_config() here: a command is the process edge: it reads the configuration and hands it to the
# beat.
from chronocore import logs
from chronocore.config import get_config
from chronocore.probe import ProbeError, add_metrics_port_argument, chosen_port
from chronocore.runtime import freeze_startup_heap
from chronocore.service_checks import check_at_start
from scheduler.beat import Beat
from scheduler.dispatch import Publisher
from scheduler.metrics import serve_beat_probe
from scheduler.timers import timer_store


class Command(BaseCommand):
    help = "Run a beat replica: fire due timers through RabbitMQ."

    def add_arguments(self, parser):
        parser.add_argument(
            "--replica-id",
            default=None,
            help="Stable id of this replica (default: <host>-<pid>).",
        )
        add_metrics_port_argument(parser)
        logs.add_logging_arguments(parser)

    def handle(self, *args, replica_id=None, metrics_port=None, log_level="INFO",
               log_format="plain", **options):
        logs.configure(log_level, log_format)
        check_at_start("beat", log_format=log_format)
        replica_id = replica_id or f"{socket.gethostname()}-{os.getpid()}"
        config = get_config()
        beat = Beat(
            replica_id=replica_id,
            config=config,
            store=timer_store(),
            publisher=Publisher(config.broker_url, origin=f"chrono-beat@{replica_id}"),
        )
        try:
            port = chosen_port(metrics_port, config.metrics_port)
            if port:
                serve_beat_probe(beat, port=port, address=config.metrics_address)
        except ProbeError as exc:
            raise CommandError(str(exc)) from None
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: beat.stop())
        freeze_startup_heap()
        beat.run()
