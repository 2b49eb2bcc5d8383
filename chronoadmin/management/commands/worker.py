"""``chrono worker``: a Celery worker of Chrono's app, consuming Chrono's quorum queues."""

from __future__ import annotations

import importlib

from django.core.management.base import BaseCommand

from chronocore.config import get_config


class Command(BaseCommand):
    help = "Run a Celery worker that records every Chrono execution."

    def add_arguments(self, parser):
        parser.add_argument("--queues", "-Q", default=None, help="Comma-separated queue names.")
        parser.add_argument("--concurrency", "-c", type=int, default=2)
        parser.add_argument("--pool", "-P", default="prefork")
        parser.add_argument("--hostname", "-n", default=None)
        parser.add_argument("--include", "-I", default=None, help="Extra task modules, comma-sep.")
        parser.add_argument("--loglevel", "-l", default="INFO")

    def handle(self, *args, **options):
        from chronoadmin.celery import app, chrono_queue

        queues = (options["queues"] or get_config().default_queue).split(",")
        app.conf.task_queues = [chrono_queue(name.strip()) for name in queues if name.strip()]
        argv = [
            "worker",
            f"--queues={','.join(q.name for q in app.conf.task_queues)}",
            f"--concurrency={options['concurrency']}",
            f"--pool={options['pool']}",
            f"--loglevel={options['loglevel']}",
            "--without-gossip",
            "--without-mingle",
        ]
        if options["hostname"]:
            argv.append(f"--hostname={options['hostname']}")
        if options["include"]:
            # Imported before the worker finalizes Chrono's app: tasks that other apps define
            # there (@shared_task, and @app.task, which Celery shares by default) then get a
            # copy registered on Chrono's app, built on ChronoTask, so their executions are
            # recorded. Celery itself would import them only after finalizing.
            for module in options["include"].split(","):
                if module.strip():
                    importlib.import_module(module.strip())
            argv.append(f"--include={options['include']}")
        app.worker_main(argv)
