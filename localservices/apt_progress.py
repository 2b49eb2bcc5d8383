"""apt-get's progress, read from its machine-readable status lines (``-o APT::Status-Fd=N``),
as the phases of a :class:`chronocore.progress.PhaseProgress`.

apt writes one line per event to that descriptor (apt-pkg's ``acquire.cc`` and
``install-progress.cc``), ``KIND:WHO:PERCENT:MESSAGE``:

- ``dlstatus:3:41.2000:Retrieving file 3 of 12 (5s remaining)``: downloading, item 3, percent
  of the bytes to fetch (``apt-get update`` knows no sizes and says 0 until the end);
- ``pmstatus:redis-server:20.0000:Unpacking redis-server (amd64)``: dpkg at work, percent of
  its steps (``dpkg-exec`` when it starts dpkg; it ends below 100);
- ``pmerror:PACKAGE:PERCENT:MESSAGE`` and ``pmconffile:…``: dpkg failed on a package, or asks
  about a configuration file.

The messages are translated (apt's locale is the caller's), so only the kind picks the phase;
the message is shown as it is. ``tests/unit/samples/apt-*.status`` are recordings of apt 2.6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chronocore.progress import PhaseProgress

# The phase each kind of status line puts the display in.
PHASES = {"dlstatus": "downloading", "pmstatus": "installing", "pmerror": "failed",
          "pmconffile": "configuration file"}


@dataclass(frozen=True)
class AptStatus:
    """One status line: its kind (``dlstatus``, ``pmstatus`` …), the item or package, the
    percent (None when apt gives none that means anything) and the message."""

    kind: str
    subject: str
    percent: float | None
    message: str


def parse_status_line(line: str) -> AptStatus | None:
    """The status ``line`` holds; None for a line of another kind or shape."""
    kind, _, rest = line.partition(":")
    if kind not in PHASES:
        return None
    subject, _, rest = rest.partition(":")
    percent_text, separator, message = rest.partition(":")
    if not separator:
        return None
    try:
        percent: float | None = float(percent_text)
    except ValueError:
        return None
    if not math.isfinite(percent) or not 0 <= percent <= 100:
        percent = None
    # A download at 0% has fetched nothing it knows the size of: a spinner says as much.
    if kind == "dlstatus" and percent == 0:
        percent = None
    return AptStatus(kind, subject, percent, message.strip())


class AptProgress:
    """Feeds one apt-get run to ``display``: its status lines pick the phase, percent and
    detail; its output lines are the detail until the first status line comes (``Reading
    package lists...``). Keeps dpkg's errors (``pmerror``) for the failure message."""

    def __init__(self, display: PhaseProgress) -> None:
        self.display = display
        self.errors: list[str] = []
        self._statuses = 0

    def status_line(self, line: str) -> None:
        status = parse_status_line(line)
        if status is None:
            return
        self._statuses += 1
        if status.kind == "pmerror":
            self.errors.append(f"{status.subject}: {status.message}")
        self.display.update(PHASES[status.kind], detail=status.message, percent=status.percent)

    def output_line(self, line: str) -> None:
        if self._statuses or not line.strip():
            return
        self.display.update(self.display.phase or "starting", detail=line.strip())
