"""``chrono bench NAME [ARGS]``: run one benchmark and print its one JSON line."""

from __future__ import annotations

import importlib
import json
import logging

from django.core.management.base import BaseCommand, CommandError

BENCHMARKS = ("dispatch", "drain", "failover", "timers", "heartbeats", "recovery", "ingest",
              "indexer", "workflow", "dashboard", "burst", "schedule-many", "logs",
              "peers", "retention", "coalescer")


class Command(BaseCommand):
    help = f"Run a benchmark ({', '.join(BENCHMARKS)}) and print one JSON line."

    def add_arguments(self, parser):
        parser.add_argument("name", choices=BENCHMARKS)
        parser.add_argument("bench_args", nargs="*", help="the benchmark's own flags, after --")

    def run_from_argv(self, argv):
        # Let the benchmark parse its own flags: everything after NAME is passed through.
        if len(argv) >= 3 and argv[2] in BENCHMARKS:
            self._bench_argv = argv[3:]
            argv = argv[:3]
        super().run_from_argv(argv)

    def handle(self, name, bench_args, **options):
        logging.getLogger("localservices").setLevel(logging.WARNING)
        module = importlib.import_module(f"bench.{name.replace('-', '_')}")
        try:
            result = module.run(getattr(self, "_bench_argv", bench_args))
        except SystemExit as exc:
            raise CommandError(f"bad arguments for bench {name}") from exc
        self.stdout.write(json.dumps(result))
