"""Progress bars of long operator commands (``chrono rebuild-timers``, ``import-beat``,
``jobs load``), by rich: on stderr, so what a command prints on stdout stays one parseable
report, and only on a terminal (a pipe, a log file or a supervisor gets no bar, no control
characters)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@contextmanager
def progress_bar(description: str, *, total: int | None, enabled: bool = True,
                 ) -> Iterator[Callable[[int], None]]:
    """A bar of ``total`` steps (None: unknown, a spinner-like bar) while the block runs;
    yields ``advance(steps)``. Nothing is drawn when ``enabled`` is False or stderr is not a
    terminal."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda steps: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(description, total=total)
        yield lambda steps: progress.advance(task, steps)
    sys.stderr.flush()
