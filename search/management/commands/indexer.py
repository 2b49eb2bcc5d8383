"""``chrono indexer``: ship the audit outbox to the search engine until SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal

from django.core.management.base import BaseCommand, CommandError

# get_config() here: a command is the process edge: it reads the configuration and hands it to the
# indexer.
from chronocore import logs
from chronocore.config import get_config
from chronocore.probe import ProbeError, add_metrics_port_argument, chosen_port
from search.client import SearchClient
from search.indexer import Indexer
from search.metrics import serve_indexer_probe


class Command(BaseCommand):
    help = "Ship audit events from the PostgreSQL outbox to the audit data stream, forever."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=None,
                            help="outbox rows per _bulk request (CHRONO_INDEXER_BATCH_SIZE)")
        add_metrics_port_argument(parser)
        logs.add_logging_arguments(parser)

    def handle(self, *args, batch_size: int | None = None, metrics_port: int | None = None,
               log_level: str = "INFO", log_format: str = "plain", **options):
        logs.configure(log_level, log_format)
        config = get_config()
        client = SearchClient.from_config(config)
        indexer = Indexer(client=client, config=config, batch_size=batch_size)
        try:
            port = chosen_port(metrics_port, config.metrics_port)
            if port:
                serve_indexer_probe(indexer, port=port, address=config.metrics_address)
        except ProbeError as exc:
            raise CommandError(str(exc)) from None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: indexer.stop())
        try:
            indexer.run()
        finally:
            client.close()
