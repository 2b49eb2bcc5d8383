"""What a failed attempt records: what its tenant sees, and what platform staff see.

``error`` is shown to the execution's tenant (the REST API, the audit search): the exception's
type and message, with paths into the server's directories (the code's, Python's, the working
directory) written as ``<server path>``. ``traceback`` is for platform staff (the admin) only: a
traceback shows the server's files, code and layout, which a tenant of shared workers has no
business reading. Pure: nothing but the exception and this process's paths.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from functools import cache
from pathlib import Path

ERROR_MAX_CHARS = 4_000  # the head: the type and the start of the message
TRACEBACK_MAX_CHARS = 32_000  # the tail: the innermost frames and the exception
SERVER_PATH = "<server path>"


def failure_error(exc: BaseException) -> str:
    """What a failure's tenant sees: ``type: message`` (``ValueError: …`` for a built-in,
    ``billing.errors.CardDeclined: …`` otherwise), paths into the server's directories (the
    code's, Python's, the working directory) written as ``<server path>``."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}")
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 -- a broken __str__ must not lose the failure
        message = "(the exception's message could not be written)"
    error = f"{name}: {message}" if message else name
    return _server_paths().sub(SERVER_PATH, error)[:ERROR_MAX_CHARS]


def failure_traceback(exc: BaseException) -> str:
    """The whole traceback of a failure (chained exceptions too), for platform staff."""
    return "".join(traceback.format_exception(exc))[-TRACEBACK_MAX_CHARS:]


@cache
def _server_paths() -> re.Pattern:
    """A path inside a directory of this server (to its end: up to a space, quote or bracket).
    The directories are those code is imported from, Python's own and the working
    directory; the longest first, so a path is hidden whole."""
    directories = {os.getcwd(), sys.prefix, sys.base_prefix, sys.exec_prefix,
                   str(Path(__file__).resolve().parent.parent)}
    directories.update(entry for entry in sys.path if entry and os.path.isabs(entry))
    prefixes = sorted({d.rstrip(os.sep) for d in directories if d.rstrip(os.sep)},
                      key=len, reverse=True)
    alternatives = "|".join(re.escape(prefix) for prefix in prefixes)
    return re.compile(rf"(?:{alternatives})(?:{re.escape(os.sep)}[^\s'\"()\[\]<>,;:]*)?(?![\w.-])")
