"""``chrono worker``: a Celery worker of Chrono's app, consuming Chrono's quorum queues."""

from __future__ import annotations

import importlib
import logging

from django.core.management.base import BaseCommand, CommandError

# get_config() here: a command is the process edge: the queues, the probe port and what it serves.
from chronocore import logs
from chronocore.config import get_config
from chronocore.service_checks import check_at_start
from scheduler import multiprocess_metrics

log = logging.getLogger("chrono.worker")


class Command(BaseCommand):
    help = "Run a Celery worker that records every Chrono execution."

    def add_arguments(self, parser):
        parser.add_argument("--queues", "-Q", default=None, help="Comma-separated queue names.")
        parser.add_argument("--concurrency", "-c", type=int, default=2)
        parser.add_argument("--pool", "-P", default="prefork")
        parser.add_argument("--hostname", "-n", default=None)
        parser.add_argument("--include", "-I", default=None, help="Extra task modules, comma-sep.")
        logs.add_logging_arguments(parser, aliases=("-l",))
        # Not chronocore.probe's helper: importing it would import prometheus_client before
        # execute() could choose its multiprocess mode.
        parser.add_argument(
            "--metrics-port", type=int, default=None, metavar="PORT",
            help="serve /metrics and /health on this port (default CHRONO_METRICS_PORT; 0: none)",
        )

    def execute(self, *args, **options):
        # Before Django's checks, which import the URL configuration and prometheus_client
        # with it: a prefork worker's runs happen in its children, whose series reach the
        # parent's probe port only through prometheus_client's multiprocess mode.
        port = options.get("metrics_port")
        if port is None:
            port = get_config().metrics_port
        if port and options.get("pool", "prefork") == "prefork":
            if multiprocess_metrics.enable() is None:
                log.error("prometheus_client was imported before the worker could switch it to "
                          "multiprocess mode: /metrics shows the main process's series only")
        return super().execute(*args, **options)

    def handle(self, *args, **options):
        from chronoadmin.celery import app, chrono_queue

        check_at_start("worker", log_format=options["log_format"])

        queues = (options["queues"] or get_config().default_queue).split(",")
        app.conf.task_queues = [chrono_queue(name.strip()) for name in queues if name.strip()]
        argv = [
            # Celery's command line takes BROKER_URL from the environment and prefers it to the
            # app's broker_url: as given there, a URL may lack the password that Chrono's config
            # completed from the credentials file. This argv never reaches the process's own
            # command line (worker_main parses it in-process), so the password does not show.
            f"--broker={get_config().broker_url}",
            "worker",
            f"--queues={','.join(q.name for q in app.conf.task_queues)}",
            f"--concurrency={options['concurrency']}",
            f"--pool={options['pool']}",
            f"--loglevel={options['log_level']}",
            "--without-gossip",
            "--without-mingle",
        ]
        logging.getLogger("chrono").setLevel(options["log_level"])
        if options["log_format"] == "json":
            _log_json()
        if options["hostname"]:
            argv.append(f"--hostname={options['hostname']}")
        self._serve_probe(options["metrics_port"])
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

    def _serve_probe(self, metrics_port: int | None) -> None:
        from chronocore.probe import ProbeError, chosen_port
        from scheduler.metrics import serve_worker_probe

        config = get_config()
        try:
            port = chosen_port(metrics_port, config.metrics_port)
            if port:
                serve_worker_probe(config=config, port=port, address=config.metrics_address)
        except ProbeError as exc:
            raise CommandError(str(exc)) from None


def _log_json() -> None:
    """JSON lines from every logger the worker sets up (Celery's root and task loggers, in the
    main process and each prefork child) and from Chrono's own."""
    from celery.signals import after_setup_logger, after_setup_task_logger

    def use_json(logger: logging.Logger, **_: object) -> None:
        logs.apply_format("json", logger)

    # weak=False: the receiver is a closure nothing else holds.
    after_setup_logger.connect(use_json, weak=False)
    after_setup_task_logger.connect(use_json, weak=False)
    logs.apply_format("json")
