"""Maven's progress, read from its batch-mode output (``mvn -B``, not ``-q``), as the phases of
a :class:`chronocore.progress.PhaseProgress`: the goal of each plugin execution is the phase
(``--- maven-compiler-plugin:3.13.0:compile (default-compile) @ launcher ---`` is ``compile``;
Maven 3.9 writes ``--- compiler:3.13.0:compile …``), what the plugin says is the detail, and
the artifacts it downloads are counted (``Downloaded from central: URL (5.2 kB at 327 kB/s)``).

Maven knows nothing in advance of how much is left, so there is no percent: a spinner. Its
``[ERROR]`` lines, without the advice Maven appends to every failure, make the failure
message. ``tests/unit/samples/mvn-*.log`` are recordings of Maven 3.8.7 building
``search/launcher``.
"""

from __future__ import annotations

import re

from chronocore.progress import PhaseProgress

# Maven colours its output with ANSI escapes even in batch mode (a bare ESC[0m at the start).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LEVEL = re.compile(r"\[(INFO|WARNING|WARN|ERROR|DEBUG)\] ?")
_EXECUTION = re.compile(r"--- (?P<plugin>\S+):(?P<version>[^:\s]+):(?P<goal>\S+)"
                        r"(?: \((?P<execution>[^)]*)\))? @ \S+ ---")
_DOWNLOADING = re.compile(r"Downloading from [^:]+: (?P<url>\S+)")
_DOWNLOADED = re.compile(r"Downloaded from [^:]+: (?P<url>\S+) \((?P<size>[\d.,]+) "
                         r"(?P<unit>[kMG]?B)")
_UNITS = {"B": 1, "kB": 1_000, "MB": 1_000_000, "GB": 1_000_000_000}
# Where the advice Maven appends to every failure begins ("-> [Help 1]", "To see the full…").
_ADVICE = ("-> [Help", "To see the full stack trace", "Re-run Maven", "For more information",
           "[Help ")
MAX_ERROR_LINES = 10


def plain_text(line: str) -> tuple[str, str]:
    """A line of Maven's output as (its level, "" when it has none; its text without colours
    or level)."""
    text = _ANSI.sub("", line).strip()
    level = _LEVEL.match(text)
    if level is None:
        return "", text
    return level.group(1), text[level.end():].strip()


def size_bytes(size: str, unit: str) -> int:
    """``1.3`` ``kB`` as bytes (Maven's decimal units)."""
    return round(float(size.replace(",", "")) * _UNITS[unit])


def human_bytes(count: int) -> str:
    for unit in ("GB", "MB", "kB"):
        if count >= _UNITS[unit]:
            return f"{count / _UNITS[unit]:.1f} {unit}"
    return f"{count} B"


class MavenProgress:
    """Feeds one Maven run's output to ``display``, counting what it downloads and keeping
    its errors (:meth:`failure`)."""

    def __init__(self, display: PhaseProgress) -> None:
        self.display = display
        self.downloads = 0
        self.downloaded_bytes = 0
        self.errors: list[str] = []
        self._advice = False

    def output_line(self, line: str) -> None:
        level, text = plain_text(line)
        if level == "ERROR":
            self._error(text)
        if execution := _EXECUTION.fullmatch(text):
            self._show(execution.group("goal"), execution.group("plugin"))
        elif not text or text.startswith("-"):  # a rule, or "---< group:artifact >---"
            return
        elif downloaded := _DOWNLOADED.match(text):
            self.downloads += 1
            self.downloaded_bytes += size_bytes(downloaded.group("size"), downloaded.group("unit"))
            self._show(None, "downloaded " + downloaded.group("url").rsplit("/", 1)[-1])
        elif downloading := _DOWNLOADING.match(text):
            self._show(None, "downloading " + downloading.group("url").rsplit("/", 1)[-1])
        elif text.startswith("BUILD SUCCESS"):
            self._show("built", "", percent=100.0)
        elif text.startswith("BUILD FAILURE"):
            self._show("failed", self.errors[0] if self.errors else "")
        elif level in ("INFO", "") and not text.startswith(("Total time", "Finished at")):
            self._show(None, text)

    def _show(self, phase: str | None, detail: str, *, percent: float | None = None) -> None:
        if self.downloads:
            files = f"{self.downloads} file{'s' if self.downloads != 1 else ''}"
            downloaded = f"{files}, {human_bytes(self.downloaded_bytes)} downloaded"
            detail = f"{detail} ({downloaded})" if detail else downloaded
        self.display.update(phase or self.display.phase or "resolving", detail=detail,
                            percent=percent)

    def _error(self, text: str) -> None:
        if text.startswith(_ADVICE):
            self._advice = True
        # Maven says the cause twice: where it happened and again in its summary.
        if (text and not self._advice and text not in self.errors
                and len(self.errors) < MAX_ERROR_LINES):
            self.errors.append(text)

    def failure(self) -> str:
        """Maven's error lines (without its advice), one per line; "" when it gave none."""
        return "\n".join(self.errors)
