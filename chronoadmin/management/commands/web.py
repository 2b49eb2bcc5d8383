"""``chrono web [ADDR:PORT]``: serve the admin, dashboard and API under gunicorn, as production
does, static files included (whitenoise, in the Django middleware).

The demo and ``chrono dev`` run this same server, so a developer sees what users will: Django's
``runserver`` is single-threaded, unhardened and does not serve static files once ``DEBUG`` is
off, which is why the admin used to appear without its stylesheet.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles.storage import ManifestFilesMixin
from django.core.files.storage import storages
from django.core.management.base import BaseCommand, CommandError
from gunicorn import glogging
from gunicorn.app.base import BaseApplication

from chronocore import logs
from chronocore.service_checks import check_at_start

DEFAULT_ADDRPORT = "127.0.0.1:8000"
DEFAULT_WORKERS = 2
DEFAULT_THREADS = 4
DEFAULT_TIMEOUT_S = 30
# A manifest storage (production settings) serves only what `collectstatic` wrote.
# The common log format, plus the request id the response carries (chronoadmin.middleware).
ACCESS_LOG_FORMAT = '%(h)s - %(u)s %(t)s "%(r)s" %(s)s %(b)s %(M)sms request=%({x-request-id}o)s'
MANIFEST_STORAGE = "ManifestStaticFilesStorage"


class ChronoWebServer(BaseApplication):
    """Gunicorn run in-process, with Chrono's WSGI application and options given here rather
    than in a configuration file."""

    def __init__(self, options: dict[str, object]) -> None:
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)
        # Gunicorn 27 opens a control socket at one fixed path per user; two web processes on
        # one machine (the demo and a test, two ports) would take it from each other.
        if "control_socket_disable" in self.cfg.settings:
            self.cfg.set("control_socket_disable", True)

    def load(self):
        from chronoadmin.wsgi import application

        return application


def gunicorn_logger(log_format: str) -> type[glogging.Logger]:
    """Gunicorn's logger, its access and error lines in ``log_format`` (``json``: one object a
    line, the access line its ``message``), like every other Chrono process's."""

    class ChronoGunicornLogger(glogging.Logger):
        def setup(self, cfg) -> None:
            super().setup(cfg)
            if log_format != "plain":
                logs.apply_format(log_format, self.error_log, self.access_log)

    return ChronoGunicornLogger


def _worker_logging(log_level: str, log_format: str, worker: object) -> None:
    if log_format == "plain":
        logging.getLogger("chrono").setLevel(log_level)
    else:
        logs.configure(log_level, log_format)


def check_static_files_collected() -> None:
    """With a manifest storage, refuse to start before ``collectstatic`` ran: otherwise every
    admin page would fail on its first stylesheet."""
    storage = storages["staticfiles"]
    if not isinstance(storage, ManifestFilesMixin):
        return
    try:
        storage.stored_name("admin/css/base.css")
    except ValueError:
        raise CommandError(
            f"static files are not collected in {settings.STATIC_ROOT}: run "
            "`chrono collectstatic --noinput` after each deploy, then start the web process"
        ) from None


class Command(BaseCommand):
    help = "Serve the admin, the dashboard and the API with gunicorn (static files included)."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default=DEFAULT_ADDRPORT,
                            help=f"address to listen on (default {DEFAULT_ADDRPORT})")
        parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                            help="gunicorn worker processes (default %(default)s)")
        parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                            help="threads per worker process (default %(default)s)")
        parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                            help="seconds before a silent worker is restarted (default "
                                 "%(default)s)")
        logs.add_logging_arguments(parser)

    def handle(self, addrport, workers, threads, timeout, log_level, log_format, **options):
        check_static_files_collected()
        check_at_start("web", log_format=log_format)
        # Whitenoise also serves STATIC_ROOT and warns in every worker when it does not exist.
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
        if workers < 1 or threads < 1:
            raise CommandError("--workers and --threads must be at least 1")
        ChronoWebServer({
            "bind": addrport,
            "workers": workers,
            "threads": threads,
            "worker_class": "gthread",
            "timeout": timeout,
            "accesslog": "-",
            "errorlog": "-",
            "proc_name": "chrono-web",
            "access_log_format": ACCESS_LOG_FORMAT,
            "loglevel": log_level.lower(),
            "logger_class": gunicorn_logger(log_format),
            # Each worker sets Django's logging up as it loads the application: the level (and
            # a JSON format) are applied again after that; plain lines keep the settings'
            # formats (a 500's line names its request id).
            "post_worker_init": partial(_worker_logging, log_level, log_format),
        }).run()
