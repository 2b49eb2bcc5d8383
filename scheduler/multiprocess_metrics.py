"""prometheus_client's multiprocess mode, for a prefork worker whose runs happen in its children.

prometheus_client picks how it stores values when it is first imported: in multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR`` set) every process writes its own file in that directory and the
parent, which serves the probe port, adds them up at each scrape. So this module imports nothing
of prometheus_client, and ``chrono worker`` calls :func:`enable` before anything else could
import it (before Django's checks load the URL configuration).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

ENVIRONMENT_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def enable() -> str | None:
    """Set up multiprocess mode; the directory of the processes' files (a fresh one, removed
    when this process exits, unless ``PROMETHEUS_MULTIPROC_DIR`` names one already). None when
    prometheus_client was imported before: the children's values then cannot be collected."""
    if os.environ.get(ENVIRONMENT_VARIABLE):
        return os.environ[ENVIRONMENT_VARIABLE]
    if "prometheus_client" in sys.modules:
        return None
    directory = tempfile.mkdtemp(prefix="chrono-worker-metrics-")
    os.environ[ENVIRONMENT_VARIABLE] = directory
    parent = os.getpid()

    def remove() -> None:
        if os.getpid() == parent:  # not in a forked child that exits
            shutil.rmtree(directory, ignore_errors=True)

    atexit.register(remove)
    return directory


def active() -> str | None:
    """The directory of multiprocess mode, if this process is in it."""
    return os.environ.get(ENVIRONMENT_VARIABLE) or None
