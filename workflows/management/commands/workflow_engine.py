"""``chrono workflow-engine``: a process that only applies workflow step ends (the engine's
listener, :class:`workflows.engine.EngineListener`), for deployments that keep it out of the
workers (``CHRONO_WORKFLOW_ENGINE_IN_WORKER=false``). Several may run; they share the work."""

from __future__ import annotations

import signal

from django.core.management.base import BaseCommand

from chronocore import logs
from chronocore.service_checks import check_at_start
from workflows.engine import EngineListener


class Command(BaseCommand):
    help = "Apply workflow step ends as they are written (the engine's listener), until stopped."

    def add_arguments(self, parser):
        logs.add_logging_arguments(parser)

    def handle(self, *args, log_level="INFO", log_format="plain", **options):
        logs.configure(log_level, log_format)
        check_at_start("workflow-engine", log_format=log_format)
        listener = EngineListener()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: listener.stop())
        self.stdout.write("workflow engine started")
        listener.run()
        self.stdout.write("workflow engine stopped")
