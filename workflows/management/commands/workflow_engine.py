"""``chrono workflow-engine``: a process that only applies workflow step ends (the engine's
listener, :class:`workflows.engine.EngineListener`). Every worker runs one as its child
(``--parent-pid``, :mod:`workflows.engine_child`) unless ``CHRONO_WORKFLOW_ENGINE_IN_WORKER=false``;
a deployment may run more, or only these. Several share the work."""

from __future__ import annotations

import signal

from django.core.management.base import BaseCommand

from chronocore import logs
from chronocore.service_checks import check_at_start
from workflows import conditions
from workflows.engine import EngineListener
from workflows.engine_child import exit_with_parent


class Command(BaseCommand):
    help = "Apply workflow step ends as they are written (the engine's listener), until stopped."

    def add_arguments(self, parser):
        logs.add_logging_arguments(parser)
        parser.add_argument(
            "--parent-pid", type=int, default=None, metavar="PID",
            help="stop when process PID (this one's parent) exits: a worker's own engine")

    def handle(self, *args, log_level="INFO", log_format="plain", parent_pid=None, **options):
        logs.configure(log_level, log_format)
        if parent_pid is None:  # a worker's child: the worker checked the services as it started
            check_at_start("workflow-engine", log_format=log_format)
        conditions.library()  # loaded now, not while a run's first condition waits for it
        listener = EngineListener()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: listener.stop())
        if parent_pid is not None:
            exit_with_parent(parent_pid, listener.stop)
        self.stdout.write("workflow engine started")
        self.stdout.flush()
        listener.run()
        self.stdout.write("workflow engine stopped")
