"""The execution-log spool: append-only files on the worker's host, written by every worker
process and read by the log shipper beside the indexer.

Layout of the spool directory (``CHRONO_EXECUTION_LOG_SPOOL_DIR``)::

    <writer>.<segment>.ndjson          lines "<document id>\\t<ECS document as JSON>\\n"
    <writer>.<segment>.ndjson.offset   how far the shipper has shipped it (bytes, decimal)

``<writer>`` names one worker process (host, pid, start time), ``<segment>`` counts its files
(six digits, so names sort in writing order). A writer holds an exclusive ``flock`` on the
segment it appends to for as long as it does (it creates the file under a temporary name, locks
it, then renames it, so no reader ever sees an unlocked segment that is still to be written).
The kernel drops the lock when the process dies, SIGKILL included: a reader that can take the
lock knows the segment is finished. A finished segment whose last line has no newline was cut by
a kill in the middle of a write; that tail is skipped and counted.

The reader commits an offset only after the engine has answered for every line before it
(:meth:`SpoolReader.commit`, written to a temporary file, fsynced and renamed over the old one),
so a shipper killed at any point sends again from its last commit and never skips a line; a
finished, fully shipped segment is deleted with its offset file.

Written by hand rather than with a library: what is needed is a few dozen lines of ``os`` and
``fcntl`` (no log-shipping library on PyPI speaks this "the writer's lock tells it is done"
protocol, and an external agent such as Filebeat or Fluent Bit would be a new daemon to deploy).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("chrono.logs")

SEGMENT_SUFFIX = ".ndjson"
OFFSET_SUFFIX = ".offset"
_WRITER_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.@-]")
# One read of a segment takes at most this much beyond the batch's budget to finish a line
# (lines are bounded by the writer's line limit, far below).
_MAX_LINE_BYTES = 8 * 1024 * 1024


def writer_id(hostname: str, pid: int, started_ms: int) -> str:
    """A spool writer's name: its host, process and start time (a pid is reused, the triple
    is not), with characters a file name should not hold replaced."""
    return _WRITER_ID_UNSAFE.sub("_", f"{hostname}-{pid}-{started_ms}")


class SpoolWriter:
    """Appends lines to one process's spool segments. Not thread-safe: one flushing thread per
    process writes (:mod:`scheduler.log_capture`)."""

    def __init__(self, directory: Path, *, writer: str, segment_bytes: int) -> None:
        self.directory = Path(directory)
        self.writer = writer
        self.segment_bytes = segment_bytes
        self._segment = 0
        self._fd: int | None = None
        self._size = 0

    def write(self, payload: bytes) -> None:
        """Append ``payload`` (whole lines, each ending with a newline); starts a new segment
        first when the current one is full."""
        if not payload:
            return
        if self._fd is None or self._size >= self.segment_bytes:
            self._open_next()
        assert self._fd is not None
        view = memoryview(payload)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(payload)

    def sync(self) -> None:
        """Make what was written survive a crash of the host (a process's death alone never
        loses written lines: they are in the kernel's page cache)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock: the segment is finished
            self._fd = None

    def _open_next(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segment += 1
        name = f"{self.writer}.{self._segment:06d}{SEGMENT_SUFFIX}"
        temporary = self.directory / f".{name}.new"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(temporary, self.directory / name)
        previous, self._fd, self._size = self._fd, fd, 0
        if previous is not None:
            os.fsync(previous)
            os.close(previous)


@dataclass
class SpoolBatch:
    """Lines read from the spool: ``(document id, document JSON)``, and for each segment read
    the offset to commit once they are shipped."""

    lines: list[tuple[str, bytes]] = field(default_factory=list)
    offsets: dict[Path, int] = field(default_factory=dict)
    bytes_read: int = 0
    torn_bytes: int = 0
    malformed_lines: int = 0


@dataclass
class _Segment:
    path: Path
    offset: int
    size: int


class SpoolReader:
    """Reads the spool directory in batches of about ``batch_bytes`` and commits offsets."""

    def __init__(self, directory: Path, *, batch_bytes: int) -> None:
        self.directory = Path(directory)
        self.batch_bytes = batch_bytes
        self._start = 0  # segments are read round-robin, so no writer waits behind another

    def pending_bytes(self) -> int:
        """Bytes written to the spool and not committed yet."""
        return sum(s.size - s.offset for s in self._segments())

    def read_batch(self) -> SpoolBatch:
        batch = SpoolBatch()
        segments = [s for s in self._segments() if s.size > s.offset]
        if not segments:
            return batch
        self._start = (self._start + 1) % len(segments)
        ordered = segments[self._start:] + segments[:self._start]
        for segment in ordered:
            budget = self.batch_bytes - batch.bytes_read
            if budget <= 0:
                break
            self._read_segment(segment, budget, batch)
        return batch

    def commit(self, batch: SpoolBatch) -> None:
        """Record ``batch``'s offsets (each durably, by rename); delete finished segments
        shipped to their end."""
        for path, offset in batch.offsets.items():
            offset_path = path.with_name(path.name + OFFSET_SUFFIX)
            temporary = offset_path.with_name(f".{offset_path.name}.new")
            with open(temporary, "w") as handle:
                handle.write(str(offset))
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temporary, offset_path)
        self.delete_shipped()

    def delete_shipped(self) -> int:
        """Delete every finished segment whose offset reached its end; how many."""
        deleted = 0
        for segment in self._segments():
            if segment.offset >= segment.size and self._finished(segment.path):
                for path in (segment.path, segment.path.with_name(
                        segment.path.name + OFFSET_SUFFIX)):
                    try:
                        path.unlink()
                    except FileNotFoundError:
                        pass
                deleted += 1
        return deleted

    # -- one segment -------------------------------------------------------------------------

    def _read_segment(self, segment: _Segment, budget: int, batch: SpoolBatch) -> None:
        with open(segment.path, "rb") as handle:
            handle.seek(segment.offset)
            data = handle.read(min(budget, segment.size - segment.offset))
            cut = data.rfind(b"\n")
            if cut == -1 and len(data) == budget:
                # One line longer than what is left of the budget: take that line whole.
                data += handle.readline(_MAX_LINE_BYTES)
                cut = data.rfind(b"\n")
        if cut == -1:
            if self._finished(segment.path):
                # Its writer died in the middle of a line: nothing will ever complete it.
                log.warning("spool segment %s ends with %d bytes of a cut line; skipped",
                            segment.path.name, segment.size - segment.offset)
                batch.torn_bytes += segment.size - segment.offset
                batch.offsets[segment.path] = segment.size
            return
        complete = data[: cut + 1]
        batch.bytes_read += len(complete)
        batch.offsets[segment.path] = segment.offset + len(complete)
        for line in complete.split(b"\n")[:-1]:
            doc_id, tab, document = line.partition(b"\t")
            if not tab or not doc_id or not document.startswith(b"{"):
                batch.malformed_lines += 1
                continue
            batch.lines.append((doc_id.decode(), document))

    def _segments(self) -> list[_Segment]:
        try:
            entries = sorted((e for e in os.scandir(self.directory)
                              if e.name.endswith(SEGMENT_SUFFIX) and not e.name.startswith(".")),
                             key=lambda e: e.name)
        except FileNotFoundError:
            return []
        segments = []
        for entry in entries:
            try:
                size = entry.stat().st_size
            except FileNotFoundError:
                continue
            segments.append(_Segment(Path(entry.path), _read_offset(Path(entry.path)), size))
        return segments

    @staticmethod
    def _finished(path: Path) -> bool:
        """Whether no process writes ``path`` any more (its writer's lock is free)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # also releases the lock just taken
        return True


def _read_offset(segment: Path) -> int:
    try:
        return int(segment.with_name(segment.name + OFFSET_SUFFIX).read_text().strip() or 0)
    except FileNotFoundError:
        return 0
    except ValueError:
        log.error("offset file of %s is not a number; shipping it again from its start "
                  "(document ids keep it from being indexed twice)", segment.name)
        return 0
