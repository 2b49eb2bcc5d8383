"""``chrono reaper``: re-queue what dead workers left behind (safe to run several)."""

from __future__ import annotations

import signal

from django.core.management.base import BaseCommand, CommandError

# get_config() here: a command is the process edge: it reads the configuration and hands it to the
# reaper.
from chronocore import logs
from chronocore.config import get_config
from chronocore.probe import ProbeError, add_metrics_port_argument, chosen_port
from chronocore.service_checks import check_at_start
from reaper.metrics import serve_reaper_probe
from reaper.reaper import Reaper
from scheduler.dispatch import Publisher
from scheduler.timers import timer_store


class Command(BaseCommand):
    help = "Detect dead workers and expired execution leases; send their jobs again."

    def add_arguments(self, parser):
        add_metrics_port_argument(parser)
        logs.add_logging_arguments(parser)

    def handle(self, *args, metrics_port=None, log_level="INFO", log_format="plain",
               **options):
        logs.configure(log_level, log_format)
        check_at_start("reaper", log_format=log_format)
        config = get_config()
        reaper = Reaper(config=config, store=timer_store(),
                        publisher=Publisher(config.broker_url, origin="chrono-reaper"))
        try:
            port = chosen_port(metrics_port, config.metrics_port)
            if port:
                serve_reaper_probe(reaper, port=port, address=config.metrics_address)
        except ProbeError as exc:
            raise CommandError(str(exc)) from None
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: reaper.stop())
        reaper.run()
