"""What every way of creating a job accepts in its text fields, checked one way.

The REST API (a single create, bulk, PATCH) and the Python API (:mod:`scheduler.api`) call these
functions, so one input gets one answer whichever way it arrives. Pure: no ORM, no config.

A job's text fields (task name, name, queue, cron expression, time zone, run_at, idempotency key,
non-retryable exception names) hold no control character: not NUL, which PostgreSQL cannot
store, and not the others either (a tab or a line feed in a name or a time zone is a mistake, and
an escape sequence in a name shown in a terminal or a log is an attack). A control character is
one of Unicode's category Cc: U+0000-U+001F, U+007F and U+0080-U+009F.
"""

from __future__ import annotations

import re

CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {0x00: "NUL", 0x09: "tab", 0x0A: "line feed", 0x0D: "carriage return",
                  0x1B: "escape", 0x7F: "delete"}


def control_character_problem(value: str) -> str | None:
    """What to change when ``value`` holds a control character; None when it holds none."""
    found = CONTROL_CHARACTER.search(value)
    if found is None:
        return None
    code = ord(found.group())
    name = _CONTROL_NAMES.get(code)
    character = f"U+{code:04X}, {name}" if name else f"U+{code:04X}"
    return f"Contains a control character ({character}) at position {found.start()}; remove it."


def printable(value: str) -> str:
    """``value`` with each control character written as its escape (``\\u0000``), to quote a
    client's input in a message: PostgreSQL cannot store a NUL (idempotency records and the
    audit keep answers), and nobody can act on an invisible character anyway."""
    if CONTROL_CHARACTER.search(value) is None:
        return value
    return CONTROL_CHARACTER.sub(lambda found: f"\\u{ord(found.group()):04x}", value)
