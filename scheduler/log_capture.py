"""Execution logs, the worker's half: what a task logs while it runs, captured per attempt and
written to this host's spool (:mod:`search.spool`), from which the indexer ships it.

One :class:`RoutingHandler` on the root logger (installed once per process, :func:`install`)
sees every record of every logger. It routes a record to the attempt running in the record's
*context* (a :class:`contextvars.ContextVar` the task base class sets around the task's body),
so two tasks running at once in one thread-pool worker never mix lines: each thread has its own
context. Code that copies the context (asyncio tasks, ``contextvars.copy_context().run``) logs
into its task's attempt too. In a prefork child (or the solo pool), one task runs at a time, so a
record from any thread of the process (a thread the task started) goes to the running attempt,
except the platform's own loggers' (Celery's, kombu's, Chrono's: the lease keeper's lines are
not the task's). What the task prints goes to Celery's ``celery.redirected`` logger
(``worker_redirect_stdouts``, on by default) in the task's thread, and so is captured too.

Bounds. An attempt keeps at most ``execution_log_max_bytes`` of lines; the process keeps at
most ``execution_log_buffer_bytes`` waiting for the next flush. What goes over either is
dropped and counted, and the attempt's last line (WARNING, logger ``chrono.logs``) says how many
lines and bytes were dropped (``chrono.dropped_lines``, ``chrono.dropped_bytes``).

Off the hot path: the task's thread only formats the record's message (its arguments may change
afterwards) and appends a tuple to a deque; a flusher thread per process encodes the documents,
appends them to the spool every ``execution_log_flush_interval_ms`` and fsyncs. A process killed
with SIGKILL loses what it had not flushed: at most that interval's lines.

Counted (:class:`CaptureCounters`, per process): the lines the flusher took and the bytes it
wrote, what was dropped and why. The flusher hands what changed to the worker's Prometheus
series after each flush (:func:`scheduler.metrics.count_log_capture`), so the task's thread
adds nothing per line (a drop takes one uncontended lock).
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from scheduler import metrics
from search.log_stream import base_document, document_id
from search.spool import SpoolWriter, writer_id

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

log = logging.getLogger("chrono.logs")
_failure_log = logging.getLogger("chrono.task")

# Loggers whose records from threads other than the task's are the platform's, not the task's.
PLATFORM_LOGGERS = ("chrono", "celery", "kombu", "amqp", "billiard", "django.db", "urllib3")
_ENTRY_OVERHEAD_BYTES = 400  # the fields every document carries besides message and error


@dataclass
class AttemptLog:
    """One attempt's capture: its tags, its next sequence number and what it took or dropped."""

    tenant_id: str
    job_id: str
    execution_id: str
    attempt: int
    worker_id: str
    job_type: str
    kept_bytes: int = 0
    dropped_lines: int = 0
    dropped_bytes: int = 0
    _sequence: itertools.count = field(default_factory=lambda: itertools.count(1))

    def next_sequence(self) -> int:
        return next(self._sequence)  # atomic under the GIL, whichever thread logs


# Why a line was not written to the spool.
DROP_ATTEMPT_LIMIT = "attempt_limit"  # over execution_log_max_bytes of its attempt
DROP_BUFFER_FULL = "buffer_full"  # over execution_log_buffer_bytes of the process
DROP_SPOOL_WRITE = "spool_write"  # the spool could not be written (disk full, permissions)
DROP_REASONS = (DROP_ATTEMPT_LIMIT, DROP_BUFFER_FULL, DROP_SPOOL_WRITE)


@dataclass
class CaptureCounters:
    """What one process's capture did since it started: lines the flusher took (``captured``),
    bytes it wrote to the spool, and lines and bytes dropped by reason."""

    captured_lines: int = 0
    spooled_bytes: int = 0
    dropped_lines: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    dropped_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))

    def copy(self) -> CaptureCounters:
        return CaptureCounters(self.captured_lines, self.spooled_bytes, dict(self.dropped_lines),
                               dict(self.dropped_bytes))

    def since(self, earlier: CaptureCounters) -> CaptureCounters:
        """What changed from ``earlier`` to these."""
        return CaptureCounters(
            self.captured_lines - earlier.captured_lines,
            self.spooled_bytes - earlier.spooled_bytes,
            {r: n - earlier.dropped_lines[r] for r, n in self.dropped_lines.items()},
            {r: n - earlier.dropped_bytes[r] for r, n in self.dropped_bytes.items()})


_current: contextvars.ContextVar[AttemptLog | None] = contextvars.ContextVar(
    "chrono_attempt_log", default=None)


class LogBuffer:
    """The process's lines waiting for the flusher, and the flusher itself."""

    def __init__(self, *, spool_dir: Path, namespace: str, flush_interval_ms: int,
                 buffer_bytes: int, segment_bytes: int) -> None:
        self.spool_dir = spool_dir
        self.namespace = namespace
        self.flush_interval_s = flush_interval_ms / 1000
        self.buffer_bytes = buffer_bytes
        self.segment_bytes = segment_bytes
        self.entries: deque[tuple] = deque()
        self.pending_bytes = 0
        self.write_failures = 0
        self.counters = CaptureCounters()
        self._published = CaptureCounters()
        self._drop_lock = threading.Lock()
        self._writer: SpoolWriter | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._hostname = socket.gethostname()

    def offer(self, entry: tuple, size: int) -> bool:
        """Keep ``entry`` for the next flush; False (dropped) when the buffer is full."""
        if self.pending_bytes + size > self.buffer_bytes:
            return False
        self.append(entry, size)
        return True

    def append(self, entry: tuple, size: int) -> None:
        """Keep ``entry`` for the next flush whatever the bound (the line saying what was
        dropped)."""
        self.pending_bytes += size
        self.entries.append(entry)
        if self._thread is None:
            self._start()

    def dropped(self, reason: str, size: int, lines: int = 1) -> None:
        """Count ``lines`` lines (``size`` bytes) dropped for ``reason`` (any thread)."""
        with self._drop_lock:
            self.counters.dropped_lines[reason] += lines
            self.counters.dropped_bytes[reason] += size

    def flush(self) -> int:
        """Write what waits to the spool and fsync it; lines written."""
        with self._flush_lock:
            count = len(self.entries)
            if not count:
                return 0
            payload, size = self._encode(count)
            self.counters.captured_lines += count
            try:
                writer = self._spool_writer()
                writer.write(payload)
                writer.sync()
                self.counters.spooled_bytes += len(payload)
            except OSError as exc:
                self.write_failures += 1
                self.dropped(DROP_SPOOL_WRITE, size, lines=count)
                if self.write_failures == 1 or self.write_failures % 1000 == 0:
                    log.error("execution logs: could not write the spool %s (%d lines lost, "
                              "%d failures so far): %r", self.spool_dir, count,
                              self.write_failures, exc)
            finally:
                self.pending_bytes -= size
            return count

    def publish(self) -> None:
        """Hand what the counters gained since the last call to the worker's series."""
        with self._flush_lock:  # no flush changes them meanwhile, no other publish races
            with self._drop_lock:
                now = self.counters.copy()
            delta, self._published = now.since(self._published), now
        metrics.count_log_capture(
            captured_lines=delta.captured_lines, spooled_bytes=delta.spooled_bytes,
            dropped_lines=delta.dropped_lines, dropped_bytes=delta.dropped_bytes)

    def close(self) -> None:
        self.flush()
        self.publish()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def after_fork_in_child(self) -> None:
        """A forked child starts empty: the parent's lines are the parent's to write, and its
        writer's file and flusher thread are not the child's."""
        self.entries = deque()
        self.pending_bytes = 0
        self.counters = CaptureCounters()
        self._published = CaptureCounters()
        self._drop_lock = threading.Lock()
        if self._writer is not None and self._writer._fd is not None:
            os.close(self._writer._fd)
        self._writer = None
        self._thread = None
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()

    def _start(self) -> None:
        with self._flush_lock:
            if self._thread is not None:
                return  # another thread's first line started it meanwhile
            thread = threading.Thread(target=self._run, name="chrono-log-flusher", daemon=True)
            self._thread = thread
            thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            try:
                self.flush()
                self.publish()
            except Exception:  # noqa: BLE001 - the flusher must outlive any one bad line
                log.exception("execution logs: a flush failed")

    def _spool_writer(self) -> SpoolWriter:
        if self._writer is None:
            self._writer = SpoolWriter(
                self.spool_dir, segment_bytes=self.segment_bytes,
                writer=writer_id(self._hostname, os.getpid(), time.time_ns() // 1_000_000))
        return self._writer

    def _encode(self, count: int) -> tuple[bytes, int]:
        parts: list[bytes] = []
        size = 0
        popleft = self.entries.popleft
        base = base_document(namespace=self.namespace)
        host = {"name": self._hostname}
        for _ in range(count):
            entry = popleft()
            size += entry[-1]
            doc_id, document = _document(entry, base, host)
            parts.append(doc_id.encode())
            parts.append(b"\t")
            parts.append(orjson.dumps(document))
            parts.append(b"\n")
        return b"".join(parts), size


def _document(entry: tuple, base: dict, host: dict) -> tuple[str, dict]:
    (attempt_log, sequence, created, level, logger, message, error, thread, pid, path, line,
     function, extra, _size) = entry
    document = dict(base)
    document["event"] = {**base["event"], "sequence": sequence}
    document["@timestamp"] = _iso_ms(created)
    document["message"] = message
    document["log"] = {"level": level, "logger": logger,
                       "origin": {"file": {"name": path, "line": line}, "function": function}}
    document["host"] = host
    document["process"] = {"pid": pid, "thread": {"name": thread}}
    chrono = {"tenant_id": attempt_log.tenant_id, "job_id": attempt_log.job_id,
              "execution_id": attempt_log.execution_id, "attempt": attempt_log.attempt,
              "worker_id": attempt_log.worker_id, "job_type": attempt_log.job_type}
    if extra:
        chrono.update(extra)
    document["chrono"] = chrono
    if error is not None:
        document["error"] = error
    return document_id(attempt_log.execution_id, attempt_log.attempt, sequence), document


def _iso_ms(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class RoutingHandler(logging.Handler):
    """Sends each record to the attempt of its context (or of the process, in a prefork
    child) and drops it when there is none."""

    def __init__(self, buffer: LogBuffer, *, level: int, max_bytes: int, line_bytes: int) -> None:
        super().__init__(level)
        self.buffer = buffer
        self.max_bytes = max_bytes
        self.line_bytes = line_bytes
        self.process_wide: AttemptLog | None = None  # the prefork child's running attempt
        self.process_wide_enabled = False
        self._formatter = logging.Formatter()

    def handle(self, record: logging.LogRecord) -> bool:
        # No handler lock: emit appends to a deque, and the lock would make every thread of a
        # thread pool wait for the others' formatting.
        if record.levelno >= self.level:
            self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        attempt_log = _current.get()
        if attempt_log is None:
            attempt_log = self.process_wide
            if attempt_log is None or (record.name.startswith(PLATFORM_LOGGERS)
                                       and record.name != "celery.redirected"):
                return
        try:
            self._take(attempt_log, record)
        except Exception:  # noqa: BLE001 - logging must never break the task
            self.handleError(record)

    def _take(self, attempt_log: AttemptLog, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if len(message) > self.line_bytes:
            message = message[: self.line_bytes] + f"… [cut at {self.line_bytes} characters]"
        error = None
        if record.exc_info and record.exc_info[0] is not None:
            exc_type, exc_value, _ = record.exc_info
            error = {"type": f"{exc_type.__module__}.{exc_type.__qualname__}",
                     "message": str(exc_value)[: self.line_bytes],
                     "stack_trace": self._formatter.formatException(record.exc_info)}
        elif record.exc_text:
            error = {"stack_trace": record.exc_text}
        size = len(message) + _ENTRY_OVERHEAD_BYTES + (
            len(error.get("stack_trace", "")) if error else 0)
        if attempt_log.kept_bytes + size > self.max_bytes:
            attempt_log.dropped_lines += 1
            attempt_log.dropped_bytes += size
            self.buffer.dropped(DROP_ATTEMPT_LIMIT, size)
            return
        entry = (attempt_log, attempt_log.next_sequence(), record.created,
                 record.levelname.lower(), record.name, message, error, record.threadName,
                 record.process, record.pathname, record.lineno, record.funcName, None, size)
        if self.buffer.offer(entry, size):
            attempt_log.kept_bytes += size
        else:
            attempt_log.dropped_lines += 1
            attempt_log.dropped_bytes += size
            self.buffer.dropped(DROP_BUFFER_FULL, size)

    def closing_line(self, attempt_log: AttemptLog) -> None:
        """The attempt's last line when something was dropped (past every bound: it is what
        shows the drop)."""
        if not attempt_log.dropped_lines:
            return
        message = (f"{attempt_log.dropped_lines} log lines ({attempt_log.dropped_bytes} bytes) "
                   f"of this attempt were dropped: over the limit of {self.max_bytes} bytes per "
                   "attempt or of the worker's log buffer")
        extra = {"dropped_lines": attempt_log.dropped_lines,
                 "dropped_bytes": attempt_log.dropped_bytes}
        entry = (attempt_log, attempt_log.next_sequence(), time.time(), "warning", log.name,
                 message, None, threading.current_thread().name, os.getpid(), __file__, 0,
                 "closing_line", extra, len(message) + _ENTRY_OVERHEAD_BYTES)
        self.buffer.append(entry, entry[-1])


_handler: RoutingHandler | None = None


def install(*, spool_dir: Path, namespace: str, level: str, flush_interval_ms: int,
            max_bytes: int, buffer_bytes: int, line_bytes: int, segment_bytes: int
            ) -> RoutingHandler:
    """Put this process's routing handler on the root logger (once; later calls return it)."""
    global _handler
    if _handler is None:
        buffer = LogBuffer(spool_dir=spool_dir, namespace=namespace,
                           flush_interval_ms=flush_interval_ms, buffer_bytes=buffer_bytes,
                           segment_bytes=segment_bytes)
        _handler = RoutingHandler(buffer, level=logging.getLevelName(level.upper()),
                                  max_bytes=max_bytes, line_bytes=line_bytes)
        logging.getLogger().addHandler(_handler)
        os.register_at_fork(after_in_child=_after_fork_in_child)
    return _handler


def install_for(config: ChronoConfig) -> RoutingHandler | None:
    """:func:`install` with ``config``'s settings; None (nothing captured) when execution logs
    are off (``CHRONO_EXECUTION_LOGS_ENABLED=0``)."""
    if not config.execution_logs_enabled:
        return None
    return install(
        spool_dir=config.log_spool_path, namespace=config.audit_namespace,
        level=config.execution_log_level, flush_interval_ms=config.execution_log_flush_interval_ms,
        max_bytes=config.execution_log_max_bytes, buffer_bytes=config.execution_log_buffer_bytes,
        line_bytes=config.execution_log_line_bytes,
        segment_bytes=config.execution_log_segment_bytes)


def flush() -> None:
    """Write what waits now (a worker process's shutdown)."""
    if _handler is not None:
        _handler.buffer.close()


def note_failure(task_name: str, exc: BaseException) -> None:
    """End the running attempt's log with the exception that ends it (logger ``chrono.task``;
    Celery logs it only after the task returned, outside the attempt). Handed to the routing
    handler itself: Chrono's loggers do not propagate to the root logger."""
    if _handler is None:
        return
    record = _failure_log.makeRecord(
        _failure_log.name, logging.ERROR, __file__, 0, "%s raised %s: %s",
        (task_name, type(exc).__qualname__, exc), (type(exc), exc, exc.__traceback__),
        "note_failure")
    _handler.handle(record)


def installed() -> RoutingHandler | None:
    return _handler


def uninstall() -> None:
    """Take the handler off and flush it (tests)."""
    global _handler
    if _handler is not None:
        logging.getLogger().removeHandler(_handler)
        _handler.buffer.close()
        _handler = None


def capture_process_wide() -> None:
    """This process runs one task at a time (a prefork child): every thread's records go to it."""
    if _handler is not None:
        _handler.process_wide_enabled = True


def _after_fork_in_child() -> None:
    if _handler is not None:
        _handler.buffer.after_fork_in_child()
        _handler.process_wide = None


class capturing:  # noqa: N801 - used as a context manager, like contextlib's
    """``with capturing(attempt_log):`` routes the records of the body to ``attempt_log``."""

    def __init__(self, attempt_log: AttemptLog) -> None:
        self.attempt_log = attempt_log
        self._token: contextvars.Token | None = None

    def __enter__(self) -> AttemptLog:
        self._token = _current.set(self.attempt_log)
        if _handler is not None and _handler.process_wide_enabled:
            _handler.process_wide = self.attempt_log
        return self.attempt_log

    def __exit__(self, *exc_info: object) -> None:
        if _handler is not None:
            if _handler.process_wide is self.attempt_log:
                _handler.process_wide = None
            _handler.closing_line(self.attempt_log)
        if self._token is not None:
            _current.reset(self._token)
