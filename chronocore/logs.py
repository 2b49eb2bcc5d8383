"""The log options of every long-running process (``chrono beat``, ``worker``, ``reaper``,
``indexer``, ``workflow-engine``, ``web``): ``--log-level`` and ``--log-format plain|json``.

Chrono's own loggers (``chrono.*``) log at the level asked; every other library's records reach
the same stream from WARNING up, so a supervisor collecting stderr sees one format. JSON lines
are python-json-logger's (one object per record: ``timestamp``, ``level``, ``logger``,
``message``, ``process``, ``thread`` and ``exc_info`` when there is one), which a log shipper
reads without a parsing rule.
"""

from __future__ import annotations

import logging
import sys

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("plain", "json")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s %(process)d %(threadName)s"
# The loggers whose handlers Django's LOGGING sets (chronoadmin/settings.py): their records do
# not reach the root logger, so their handlers get the chosen format too.
_OWN_HANDLERS = ("chrono", "django.request")


def add_logging_arguments(parser, *, default_level: str = "INFO",
                          aliases: tuple[str, ...] = ()) -> None:
    """Add ``--log-level`` (also ``--loglevel``, Celery's spelling, and ``aliases``) and
    ``--log-format`` to a command's parser."""
    parser.add_argument("--log-level", "--loglevel", *aliases, type=str.upper, choices=LEVELS,
                        default=default_level, dest="log_level",
                        help=f"level of Chrono's own log lines (default {default_level}); other "
                        "libraries log from WARNING up")
    parser.add_argument("--log-format", choices=FORMATS, default="plain",
                        help="plain text lines (default) or one JSON object per line")


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of ``log_format`` (``plain`` or ``json``)."""
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        return JsonFormatter(_JSON_FIELDS, rename_fields={
            "asctime": "timestamp", "levelname": "level", "name": "logger",
            "threadName": "thread"})
    return logging.Formatter(PLAIN_FORMAT)


def apply_format(log_format: str, *loggers: logging.Logger) -> None:
    """Give every handler of ``loggers`` and of Chrono's own loggers the ``log_format``
    formatter (the worker's, whose root handler Celery sets up)."""
    chosen = formatter(log_format)
    for logger in (*loggers, *map(logging.getLogger, _OWN_HANDLERS)):
        for handler in logger.handlers:
            handler.setFormatter(chosen)


def current() -> tuple[str, str]:
    """This process's ``(log_level, log_format)``, as :func:`configure` or :func:`apply_format`
    set them: what a child process is started with to log as its parent does."""
    from pythonjsonlogger.json import JsonFormatter

    level = logging.getLevelName(logging.getLogger("chrono").getEffectiveLevel())
    handlers = [handler for name in _OWN_HANDLERS for handler in logging.getLogger(name).handlers]
    json_lines = any(isinstance(handler.formatter, JsonFormatter) for handler in handlers)
    return (level if level in LEVELS else "INFO"), ("json" if json_lines else "plain")


def configure(log_level: str = "INFO", log_format: str = "plain") -> None:
    """Set the process's logging: ``chrono.*`` at ``log_level``, everything in ``log_format``
    on stderr (a root handler for other libraries, from WARNING up)."""
    chosen = formatter(log_format)
    logging.getLogger("chrono").setLevel(log_level)
    for name in _OWN_HANDLERS:
        for handler in logging.getLogger(name).handlers:
            handler.setFormatter(chosen)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_chrono_root", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._chrono_root = True
    handler.setFormatter(chosen)
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)
