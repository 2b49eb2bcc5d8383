"""The checks of the services' settings, as Chrono's processes run them when they start.

The checks themselves (what Redis, RabbitMQ and PostgreSQL must be set to, and asking them) are
Django system checks registered by the top app (``chronoadmin/checks.py``) under
:data:`SERVICES_TAG`; they do nothing unless asked (:func:`asking_services`), so that Django's
own run of the registered checks before every command stays static. Chrono's ``check`` command
asks; so does every long-running process when it starts (beat, worker, reaper, indexer,
workflow engine, web), through :func:`check_at_start`, which lives down here so that the commands
of every package can call it without importing the top.

What a process does with what the checks found is ``CHRONO_SERVICE_CHECKS``
(``settings.CHRONO_SERVICE_CHECKS``, read once at start-up): ``error`` refuses to start on an
error (a setting that loses accepted work, a version that cannot run Chrono), naming it and what
to change; ``warn`` logs it and starts; ``off`` asks nothing. Unset, it is ``error`` under
``chronoadmin.settings_production`` and ``warn`` under the development settings, whose own
PostgreSQL (``chrono services up``) runs ``synchronous_commit = off`` on purpose. A service that
does not answer is only a warning in any mode: the process's loops retry it with back-off.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Iterator

from django.conf import settings
from django.core import checks
from django.core.management.base import CommandError

from chronocore import logs
from chronocore.errors import ChronoCoreError

SERVICES_TAG = "chrono_services"
SERVICE_CHECK_MODES = ("error", "warn", "off")

log = logging.getLogger("chrono.checks")

_asking_services = contextvars.ContextVar("chrono_asking_services", default=False)


@contextlib.contextmanager
def asking_services() -> Iterator[None]:
    """Run the checks of :data:`SERVICES_TAG` for real inside this block."""
    token = _asking_services.set(True)
    try:
        yield
    finally:
        _asking_services.reset(token)


def asked() -> bool:
    """Whether the checks of the services were asked for (inside :func:`asking_services`)."""
    return _asking_services.get()


class ServicesRefused(ChronoCoreError, CommandError):
    """Raised when a process starts with ``CHRONO_SERVICE_CHECKS=error`` and a service it
    depends on has a setting that loses work or a version that cannot run Chrono (a
    ``CommandError``: the command exits 1 with the message, no traceback)."""


def check_at_start(process: str, *, log_format: str = "plain") -> list[checks.CheckMessage]:
    """Check the services' settings as ``process`` (``beat``, ``worker``…) starts: log what
    is wrong (on stderr, in the process's ``--log-format``: a worker's or web process's own
    logging is set up only later, by Celery or gunicorn), and raise :class:`ServicesRefused`
    on an error when the mode is ``error``. Returns what the checks found (nothing when the
    mode is ``off``)."""
    mode = settings.CHRONO_SERVICE_CHECKS
    if mode == "off":
        return []
    with asking_services():
        found = checks.run_checks(tags=[SERVICES_TAG])
    errors = [message for message in found if message.is_serious()]
    with _reporting(log_format):
        for message in found:
            level = logging.ERROR if message.is_serious() else logging.WARNING
            log.log(level, "%s: %s", process, _text(message))
        if errors and mode != "error":
            log.warning("%s: starting anyway (CHRONO_SERVICE_CHECKS=%s); fix the above before "
                        "production", process, mode)
    if errors and mode == "error":
        raise ServicesRefused(
            f"chrono {process} refuses to start: the services it depends on are set in a way "
            "that loses work (CHRONO_SERVICE_CHECKS=error):\n"
            + "\n".join(f"  {_text(message)}" for message in errors))
    return found


@contextlib.contextmanager
def _reporting(log_format: str) -> Iterator[None]:
    """The check's lines on stderr in ``log_format``, whatever handlers the process has yet."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.formatter(log_format))
    propagate = log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


def _text(message: checks.CheckMessage) -> str:
    hint = f" HINT: {message.hint}" if message.hint else ""
    return f"({message.id}) {message.msg}{hint}"
