"""The probe port of a long-running process: ``/metrics`` for Prometheus, ``/health`` for a
supervisor.

The beat, the worker, the reaper and the indexer each serve one (``--metrics-port``, or
``CHRONO_METRICS_PORT``; off by default) from a daemon thread: a ``wsgiref`` server, one thread
per request, so a slow scrape never touches the process's own loops. ``/metrics`` is
prometheus_client's exposition of the process's registry; ``/health`` answers 200 while every
check passes and 503 naming the ones that do not, as JSON.

A check is usually a :class:`Progress`: the loop that matters marks it each time it gets through
an iteration (the beat's loop, the reaper's pass, the indexer's batch, the worker's heartbeat),
and the check fails once no mark came for ``stale_after_ms``. A process that is alive but
stuck (a hung database call, an endless back-off) so turns 503, which a process that merely
answers HTTP would not show. Clocks are monotonic: a wall-clock step never makes a process
stale.

Nothing here imports Django: the probe must answer while the database does not.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily

from chronocore.errors import ProbeError

log = logging.getLogger("chrono.probe")

DEFAULT_ADDRESS = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's answer: whether it passed, and what a person reading ``/health`` needs."""

    healthy: bool
    details: Mapping[str, Any] = field(default_factory=dict)


class Progress:
    """When a loop last got through an iteration; stale after ``stale_after_ms`` without one.

    ``mark()`` is a clock read and an attribute store (no lock: a reader sees the old or the new
    float, both fine), cheap enough for any loop."""

    def __init__(self, name: str, *, stale_after_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if stale_after_ms <= 0:
            raise ValueError("stale_after_ms must be positive")
        self.name = name
        self.stale_after_ms = stale_after_ms
        self._clock = clock
        self._started = clock()
        self._last: float | None = None

    def mark(self) -> None:
        self._last = self._clock()

    def age_s(self) -> float | None:
        """Seconds since the last mark; None before the first."""
        return None if self._last is None else self._clock() - self._last

    def check(self) -> CheckResult:
        stale_after_s = self.stale_after_ms / 1000
        age = self.age_s()
        if age is None:
            # Starting up: healthy until it has had the time any iteration gets.
            waited = self._clock() - self._started
            return CheckResult(waited <= stale_after_s, {
                "last_progress_s_ago": None, "starting_for_s": round(waited, 3),
                "stale_after_s": stale_after_s,
            })
        return CheckResult(age <= stale_after_s, {
            "last_progress_s_ago": round(age, 3), "stale_after_s": stale_after_s,
        })


Check = Callable[[], CheckResult]


def health(process: str, checks: Mapping[str, Check]) -> tuple[bool, dict[str, Any]]:
    """Run every check; ``(healthy, body)``. A check that raises fails, with its error."""
    results: dict[str, Any] = {}
    for name, check in checks.items():
        try:
            result = check()
        except Exception as exc:  # a broken check is an unhealthy answer, not a 500
            result = CheckResult(False, {"error": repr(exc)})
        results[name] = {"healthy": result.healthy, **result.details}
    healthy = all(r["healthy"] for r in results.values())
    body = {"process": process, "healthy": healthy, "checks": results,
            "failing": sorted(name for name, r in results.items() if not r["healthy"])}
    return healthy, body


class ProgressCollector:
    """``chrono_progress_age_seconds{process, loop}``: seconds since each loop's last mark."""

    def __init__(self, process: str, progresses: Iterable[Progress]) -> None:
        self.process = process
        self.progresses = list(progresses)

    def collect(self):
        family = GaugeMetricFamily(
            "chrono_progress_age_seconds",
            "Seconds since the loop last got through an iteration (the /health check).",
            labels=["process", "loop"],
        )
        for progress in self.progresses:
            age = progress.age_s()
            if age is not None:
                family.add_metric([self.process, progress.name], age)
        yield family


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (wsgiref's name)
        log.debug("probe: " + format, *args)


def probe_app(process: str, registry: CollectorRegistry, checks: Mapping[str, Check]):
    """The WSGI app of a probe port: ``/metrics``, ``/health``, 404 for anything else."""
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/").rstrip("/") or "/"
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/health":
            healthy, body = health(process, checks)
            payload = json.dumps(body).encode()
            start_response("200 OK" if healthy else "503 Service Unavailable",
                           [("Content-Type", "application/json"),
                            ("Content-Length", str(len(payload))), ("Cache-Control", "no-store")])
            return [payload]
        payload = b'{"detail": "not found: try /metrics or /health"}'
        start_response("404 Not Found", [("Content-Type", "application/json"),
                                         ("Content-Length", str(len(payload)))])
        return [payload]

    return app


class ProbeServer:
    """A probe port served from a daemon thread; :meth:`close` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def close_inherited(self) -> None:
        """In a forked child (a prefork worker's pool process): close the listening socket it
        inherited, which would otherwise hold the port after the parent is gone."""
        self._server.socket.close()


def serve_probe(
    *,
    process: str,
    port: int,
    address: str = DEFAULT_ADDRESS,
    checks: Mapping[str, Check],
    registry: CollectorRegistry = REGISTRY,
    progresses: Sequence[Progress] = (),
) -> ProbeServer:
    """Serve ``/metrics`` and ``/health`` of ``process`` on ``address:port`` from a daemon
    thread. ``progresses`` are also exposed as ``chrono_progress_age_seconds``. Raises
    :class:`ProbeError` when the port cannot be bound."""
    if progresses:
        registry.register(ProgressCollector(process, progresses))
    try:
        server = make_server(address, port, probe_app(process, registry, checks),
                             server_class=_Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise ProbeError(f"cannot serve the {process}'s metrics and health on "
                         f"{address}:{port}: {exc.strerror or exc}") from None
    thread = threading.Thread(target=server.serve_forever, name=f"chrono-probe-{process}",
                              daemon=True)
    thread.start()
    log.info("%s: metrics on http://%s:%d/metrics, health on /health", process, address,
             server.server_port)
    return ProbeServer(server, thread)


def add_metrics_port_argument(parser: Any) -> None:
    """``--metrics-port N`` on a command's argument parser (``CHRONO_METRICS_PORT`` if not
    given; 0 serves nothing)."""
    parser.add_argument(
        "--metrics-port", type=int, default=None, metavar="PORT",
        help="serve /metrics and /health on this port (default CHRONO_METRICS_PORT; 0: none)",
    )


def chosen_port(option: int | None, configured: int) -> int:
    """The probe port: the command's option when given, else the configured one."""
    port = configured if option is None else option
    if not 0 <= port <= 65_535:
        raise ProbeError(f"--metrics-port {port} is not a TCP port (0 to 65535; 0: none)")
    return port


def free_port(address: str = DEFAULT_ADDRESS) -> int:
    """A TCP port nothing listens on now (for tests and ``chrono dev``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]
