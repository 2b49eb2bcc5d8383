"""``chrono dev``: beat, worker, reaper, indexer and web server in one command, stopped together
by Ctrl-C."""

from __future__ import annotations

import signal
import time

from django.core.management.base import BaseCommand

from localservices.processes import REPO_ROOT, ProcessFailed, ProcessGroup

WEB_ADDR = "127.0.0.1:8000"
# The worker's hostname starts so (Celery expands %h to the machine's name).
DEV_WORKER_PREFIX = "dev-worker@"


def start_platform(stdout, *, web_addr: str = WEB_ADDR) -> ProcessGroup:
    """Start a beat, a worker, the reaper, the audit indexer and the web server; returns once
    each has started."""
    group = ProcessGroup(env={}, log_dir=REPO_ROOT / ".chrono" / "logs")
    group.start("beat", ["beat", "--replica-id", "dev-beat"])
    group.start("worker", ["worker", "--concurrency", "2", "--hostname", f"{DEV_WORKER_PREFIX}%h"])
    group.start("reaper", ["reaper"])
    group.start("indexer", ["indexer"])
    group.start("web", ["web", web_addr])
    time.sleep(2)
    for child in group.children:
        if child.popen.poll() is not None:
            group.stop_all()
            raise ProcessFailed(f"{child.name} exited at start:\n{child.log_tail()}")
        stdout.write(f"  {child.name:<7} pid {child.pid:<7} log {child.log_path}")
    return group


def run_until_interrupted(group: ProcessGroup, on_tick=None) -> None:
    """Block until Ctrl-C / SIGTERM or a child dies; then stop every child cleanly."""
    stopping = []
    # Installed explicitly: a shell that starts us in the background leaves SIGINT ignored.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.append(True))
    try:
        while not stopping:
            for child in group.children:
                if child.popen.poll() is not None:
                    raise ProcessFailed(f"{child.name} exited:\n{child.log_tail()}")
            if on_tick is not None:
                on_tick()
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        group.stop_all()


class Command(BaseCommand):
    help = "Run beat, worker, reaper, indexer and web server together until Ctrl-C."

    def handle(self, *args, **options):
        group = start_platform(self.stdout)
        self.stdout.write(f"Chrono is up: admin at http://{WEB_ADDR}/admin/  (Ctrl-C stops)")
        run_until_interrupted(group)
        self.stdout.write("stopped")
