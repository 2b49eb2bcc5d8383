"""``chrono indexer``: ship the audit outbox to the search engine until SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal

from django.core.management.base import BaseCommand

from chronocore.config import get_config
from search.client import SearchClient
from search.indexer import Indexer


class Command(BaseCommand):
    help = "Ship audit events from the PostgreSQL outbox to the audit data stream, forever."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=None,
                            help="outbox rows per _bulk request (CHRONO_INDEXER_BATCH_SIZE)")

    def handle(self, *args, batch_size: int | None = None, **options):
        config = get_config()
        client = SearchClient.from_config(config)
        indexer = Indexer(client=client, config=config, batch_size=batch_size)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: indexer.stop())
        try:
            indexer.run()
        finally:
            client.close()
