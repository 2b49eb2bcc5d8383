"""Progress displays of long operations, by rich: a bar of counted steps (``chrono
rebuild-timers``, ``import-beat``, ``jobs load``) and a spinner of phases (``chrono services
up``'s apt and Maven runs). Drawn on stderr, so what a command prints on stdout stays one
parseable report, and only on a terminal: a pipe, a log file or CI gets no bar and no control
characters (the phases become plain log lines instead)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

# Off a terminal, a phase's progress is logged each time it passes another step of this many
# percent, and its detail at most once per interval (a cold Maven build downloads for a minute
# within one phase: CI should see it is alive, not two hundred lines).
PLAIN_PERCENT_STEP = 10.0
PLAIN_INTERVAL_S = 10.0


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


class PhaseProgress:
    """What a long command reports as it runs: its ``phase`` (a word that changes a few times:
    ``downloading``, ``installing``, ``compile``), the ``detail`` of the moment (the file, the
    package) and, when known, how far the phase is (``percent``, 0-100; None: a spinner).

    This base class draws nothing: it writes plain lines to ``plain`` (a logger's ``info``)
    when the phase changes, when its percent passes another :data:`PLAIN_PERCENT_STEP`, and
    when the detail changed and :data:`PLAIN_INTERVAL_S` passed since the last line.
    :func:`phase_progress` gives the terminal's version, which draws a bar instead."""

    def __init__(self, title: str, *, plain: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.title = title
        self.phase: str | None = None
        self.detail = ""
        self.percent: float | None = None
        self._plain = plain
        self._clock = clock
        self._logged_at = 0.0
        self._logged_step = -1
        self._logged_detail = ""

    def update(self, phase: str, *, detail: str | None = None,
               percent: float | None = None) -> None:
        """The command is in ``phase``, at ``detail`` (None: unchanged within the phase),
        ``percent`` of the way through it (None: unknown)."""
        new_phase = phase != self.phase
        if new_phase or detail is not None:
            self.detail = detail or ""
        self.phase = phase
        self.percent = None if percent is None else min(max(percent, 0.0), 100.0)
        self._report(new_phase)

    def _report(self, new_phase: bool) -> None:
        now = self._clock()
        step = -1 if self.percent is None else int(self.percent // PLAIN_PERCENT_STEP)
        if new_phase:
            self._logged_step = -1
        due = (new_phase or step > self._logged_step
               or (self.detail != self._logged_detail
                   and now - self._logged_at >= PLAIN_INTERVAL_S))
        if not due:
            return
        self._logged_at, self._logged_step, self._logged_detail = now, step, self.detail
        self._plain(self.line())

    def line(self) -> str:
        """The state as one plain line: ``apt-get install: installing 40%: Unpacking redis``."""
        return f"{self.title}: {self.status()}"

    def status(self) -> str:
        """The phase, its percent when known, and the detail: ``installing 40%: Unpacking``."""
        text = str(self.phase)
        if self.percent is not None:
            text += f" {self.percent:.0f}%"
        return f"{text}: {self.detail}" if self.detail else text


class _DrawnPhaseProgress(PhaseProgress):
    """The terminal's :class:`PhaseProgress`: one line of rich's live display (a spinner, the
    title, a bar that pulses while the percent is unknown, the phase and detail, the time)."""

    def __init__(self, title: str, progress: Progress, task: TaskID) -> None:
        super().__init__(title, plain=lambda line: None)
        self._progress = progress
        self._task = task

    def _report(self, new_phase: bool) -> None:
        self._progress.update(self._task, status=self.status(), completed=self.percent or 0.0,
                              total=None if self.percent is None else 100.0)


@contextmanager
def phase_progress(title: str, *, plain: Callable[[str], None], enabled: bool = True,
                   console: Console | None = None) -> Iterator[PhaseProgress]:
    """A :class:`PhaseProgress` for the block: drawn on ``console`` (default: stderr) when it
    is a terminal and ``enabled``, else written as plain lines to ``plain``."""
    console = console or Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield PhaseProgress(title, plain=plain)
        return
    # The status is the command's own text (a URL, "[151 kB]"): no markup, one line, cut
    # with an ellipsis to the terminal's width.
    status = TextColumn("{task.fields[status]}", markup=False, table_column=Column(
        no_wrap=True, overflow="ellipsis", ratio=1))
    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False),
               BarColumn(bar_width=24), TimeElapsedColumn(), status)
    # Not transient: the last state (the phase it ended in) stays on the screen as its record.
    with Progress(*columns, console=console, transient=False, expand=True) as progress:
        task = progress.add_task(title, total=None, status="starting")
        yield _DrawnPhaseProgress(title, progress, task)
    console.file.flush()
