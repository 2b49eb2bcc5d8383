"""``chrono reaper``: re-queue what dead workers left behind (safe to run several), and keep the
dashboard's all-tenants snapshot (:mod:`chronoadmin.dashboard_snapshot`).

The command lives here, at the top, rather than in ``reaper/``: the process it starts also
runs the dashboard's snapshotter, whose figures are chronoadmin's, and ``reaper`` may not import
``chronoadmin`` (the layers' contract); the reaper's loop itself knows nothing of it.
"""

from __future__ import annotations

import os
import signal
import socket

from django.core.management.base import BaseCommand, CommandError
from prometheus_client import REGISTRY

from chronoadmin.dashboard_snapshot import DashboardSnapshotter, SnapshotCollector

# get_config() here: a command is the process edge: it reads the configuration and hands it to the
# reaper.
from chronocore import logs
from chronocore.config import get_config
from chronocore.probe import ProbeError, add_metrics_port_argument, chosen_port
from chronocore.redis_client import redis_client
from chronocore.service_checks import check_at_start
from reaper.metrics import serve_reaper_probe
from reaper.reaper import Reaper
from scheduler.dispatch import Publisher
from scheduler.timers import timer_store


class Command(BaseCommand):
    help = ("Detect dead workers and expired execution leases; send their jobs again. Also "
            "computes the dashboard's all-tenants snapshot.")

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
        snapshotter = None
        if config.dashboard_snapshot_interval_ms:
            snapshotter = DashboardSnapshotter(
                client=redis_client(), interval_ms=config.dashboard_snapshot_interval_ms,
                heartbeat_interval_s=config.worker_heartbeat_interval_ms / 1000,
                owner=f"{socket.gethostname()}:{os.getpid()}")
        try:
            port = chosen_port(metrics_port, config.metrics_port)
            if port:
                if snapshotter is not None:
                    REGISTRY.register(SnapshotCollector(snapshotter))
                serve_reaper_probe(reaper, port=port, address=config.metrics_address)
        except ProbeError as exc:
            raise CommandError(str(exc)) from None

        def stop(*_: object) -> None:
            reaper.stop()
            if snapshotter is not None:
                snapshotter.stop()

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stop)
        if snapshotter is not None:
            snapshotter.start()
        reaper.run()
