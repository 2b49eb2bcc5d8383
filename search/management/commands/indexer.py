"""``chrono indexer``: ship the audit outbox and this host's execution-log spool to the search
engine until SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

# get_config() here: a command is the process edge: it reads the configuration and hands it to the
# indexer.
from chronocore import logs
from chronocore.config import get_config
from chronocore.probe import ProbeError, add_metrics_port_argument, chosen_port
from chronocore.service_checks import check_at_start
from search.client import SearchClient
from search.indexer import Indexer
from search.log_shipper import LogShipper
from search.metrics import serve_indexer_probe


class Command(BaseCommand):
    help = ("Ship audit events from the PostgreSQL outbox to the audit data stream, and the "
            "execution logs of this host's spool to their data stream, forever.")

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=None,
                            help="outbox rows per _bulk request (CHRONO_INDEXER_BATCH_SIZE)")
        what = parser.add_mutually_exclusive_group()
        what.add_argument("--no-logs", action="store_true",
                          help="ship the audit outbox only (another host ships the spool)")
        what.add_argument("--logs-only", action="store_true",
                          help="ship this host's execution-log spool only (a worker host's "
                               "shipper; another indexer ships the audit outbox)")
        add_metrics_port_argument(parser)
        logs.add_logging_arguments(parser)

    def handle(self, *args, batch_size: int | None = None, metrics_port: int | None = None,
               log_level: str = "INFO", log_format: str = "plain", no_logs: bool = False,
               logs_only: bool = False, **options):
        logs.configure(log_level, log_format)
        check_at_start("indexer", log_format=log_format)
        config = get_config()
        client = SearchClient.from_config(config)
        indexer = Indexer(client=client, config=config, batch_size=batch_size)
        shipper = None if no_logs else LogShipper(client=SearchClient.from_config(config),
                                                  config=config)
        try:
            port = chosen_port(metrics_port, config.metrics_port)
            if port:
                serve_indexer_probe(None if logs_only else indexer, shipper=shipper, port=port,
                                    address=config.metrics_address)
        except ProbeError as exc:
            raise CommandError(str(exc)) from None

        def stop(*_: object) -> None:
            indexer.stop()
            if shipper is not None:
                shipper.stop()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        thread = None
        if shipper is not None:
            thread = threading.Thread(target=shipper.run, name="log-shipper", daemon=True)
            thread.start()
        try:
            if logs_only:
                assert thread is not None
                while thread.is_alive():
                    thread.join(0.5)
            else:
                indexer.run()
                if thread is not None:
                    thread.join(30)
        finally:
            client.close()
            if shipper is not None:
                shipper.client.close()
