"""The log shipper: sends the execution-log spool of this host to the execution-log data stream,
in bulk, beside the audit indexer (``chrono indexer`` runs it on a thread of its own).

One batch: read about ``log_shipper_batch_bytes`` of complete lines from the spool's segments
(:class:`search.spool.SpoolReader`), send them with one ``_bulk`` of ``create`` operations whose
``_id`` is the line's (execution, attempt, sequence), and commit the segments' offsets only when
the engine answered for every line (created, or 409: already there). Anything else (the engine
down, a 429, a timeout) commits nothing; the same lines go again after a back-off.

Crash safety. A shipper killed between a ``_bulk`` and its commit sends those lines again when
it starts: ``create`` answers 409 for the ones in the same backing index, but a data stream
checks ids only in its write index, so after a rollover they would be indexed twice. Hence, as
the audit indexer does, the first batch after a start or a failed request is *in doubt*: its
ids are looked up across every backing index first (after a grace, so a request the engine
was still executing has finished), and only the missing ones are sent. In steady state nothing
is in doubt and nothing is looked up.

One shipper per spool directory: it holds ``shipper.lock`` in it (``flock``); a second one on
the same host waits as a standby.

What it did is counted in :class:`ShipperCounters` (read by the indexer's probe port at scrape
time, :mod:`search.metrics`); the lag of each batch (its oldest line's ``@timestamp`` to the
engine's answer) is found without decoding the documents: the capture writes ``@timestamp``
in one fixed ISO 8601 form, which sorts as text, so one ``find`` and a comparison per line,
and one parse per batch, give it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import Histogram

from chronocore.probe import Progress
from search.client import BulkOutcome, SearchClient
from search.errors import SearchError
from search.log_stream import LogStream, install
from search.spool import SpoolReader

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

log = logging.getLogger("chrono.logs")

LOCK_NAME = "shipper.lock"
# Written by a shipper that stopped cleanly (everything it sent was answered and committed), so
# its successor need not look its first batch up.
CLEAN_STOP_NAME = "shipper.clean-stop"
STATS_LOG_INTERVAL_S = 30.0
MIN_BACKOFF_S = 0.2
STANDBY_RETRY_S = 5.0
_TIMESTAMP_KEY = b'"@timestamp":"'
_TIMESTAMP_CHARS = len("2026-12-01T10:00:00.123Z")
LAG_BUCKETS_S = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


@dataclass
class ShipperCounters:
    """What one shipper did since it started (written by its thread alone)."""

    batches: int = 0
    created: int = 0
    already_indexed: int = 0
    refused: int = 0
    # A _bulk (or a lookup of ids in doubt) that failed: the engine down, 5xx, a timeout.
    failed_iterations: int = 0
    # A _bulk the engine answered but not for every line (429 items): sent again.
    retried_batches: int = 0
    bytes_sent: int = 0
    torn_bytes: int = 0
    malformed_lines: int = 0
    # The oldest line of the last batch the engine took: its @timestamp to the answer.
    lag_s: float = 0.0

    def summary(self) -> str:
        return (f"batches={self.batches} created={self.created} "
                f"already_indexed={self.already_indexed} refused={self.refused} "
                f"bytes_sent={self.bytes_sent} torn_bytes={self.torn_bytes} "
                f"malformed_lines={self.malformed_lines} "
                f"failed_iterations={self.failed_iterations} "
                f"retried_batches={self.retried_batches} lag_s={self.lag_s:.3f}")


@dataclass
class ShipReport:
    read: int = 0
    created: int = 0
    already_indexed: int = 0
    refused: int = 0
    committed: bool = False


class LogShipper:
    """Ships ``config.log_spool_path`` to ``stream``; :meth:`run` until :meth:`stop`,
    :meth:`ship_once` one batch (tests and benchmarks drive it)."""

    def __init__(self, *, client: SearchClient, config: ChronoConfig,
                 stream: LogStream | None = None, spool_dir: Path | None = None) -> None:
        self.client = client
        self.config = config
        self.stream = stream or LogStream.from_config(config)
        self.spool_dir = Path(spool_dir or config.log_spool_path)
        self.reader = SpoolReader(self.spool_dir, batch_bytes=config.log_shipper_batch_bytes)
        self.counters = ShipperCounters()
        # Observed once per batch the engine took, with its oldest line's lag; not registered
        # anywhere: the probe's collector (search.metrics) exposes it with the counters.
        self.lag = Histogram(
            "chrono_log_shipper_batch_lag_seconds",
            "Per batch the engine took: its oldest line's @timestamp (when the task logged it) "
            "to the engine's answer to the _bulk (searchable within its 1 s refresh).",
            buckets=LAG_BUCKETS_S, registry=None)
        # Marked after every batch, empty poll or standby check that went through (/health).
        self.progress = Progress("shipper", stale_after_ms=stale_after_ms(config))
        self.in_doubt = True  # a predecessor may have sent lines it did not commit
        self._doubt_since = time.monotonic()
        self._stopping = threading.Event()
        self._lock_fd: int | None = None

    def stop(self) -> None:
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def active(self) -> bool:
        """Whether this shipper holds the spool's lock (ships), rather than standing by."""
        return self._lock_fd is not None

    def run(self) -> None:
        """Install the stream, then ship until :meth:`stop`; failures are logged and retried
        with back-off, never raised."""
        backoff_s = MIN_BACKOFF_S
        installed = False
        next_stats = time.monotonic() + STATS_LOG_INTERVAL_S
        while not self.stopping:
            try:
                if not self._hold_lock():
                    self.progress.mark()
                    self._stopping.wait(STANDBY_RETRY_S)
                    continue
                if not installed:
                    install(self.client, self.config, self.stream)
                    installed = True
                    log.info("log shipper shipping %s to %s", self.spool_dir, self.stream.name)
                report = self.ship_once()
                self.progress.mark()
            except (SearchError, OSError) as exc:
                self.counters.failed_iterations += 1
                log.error("log shipper batch failed, retrying in %.1f s: %r", backoff_s, exc)
                self._stopping.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.config.indexer_max_backoff_ms / 1000)
                continue
            if time.monotonic() >= next_stats:
                log.info("log shipper %s: %s", self.stream.name, self.counters.summary())
                next_stats = time.monotonic() + STATS_LOG_INTERVAL_S
            if report.read and not report.committed:
                self._stopping.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.config.indexer_max_backoff_ms / 1000)
                continue
            backoff_s = MIN_BACKOFF_S
            if report.read == 0:
                self._stopping.wait(self.config.log_shipper_poll_interval_ms / 1000)
        if self._lock_fd is not None:
            # Every request this shipper made was answered (a failed one raised, and a batch
            # not committed leaves the next start in doubt only if the file is not written).
            if not self.in_doubt:
                (self.spool_dir / CLEAN_STOP_NAME).touch()
        self._release_lock()
        log.info("log shipper stopped: %s", self.counters.summary())

    def ship_once(self) -> ShipReport:
        """Send one batch of the spool; commit it if the engine answered for all of it."""
        batch = self.reader.read_batch()
        self.counters.torn_bytes += batch.torn_bytes
        self.counters.malformed_lines += batch.malformed_lines
        report = ShipReport(read=len(batch.lines))
        if not batch.lines:
            if batch.offsets:  # only a cut tail or malformed lines: nothing to send
                self.reader.commit(batch)
                report.committed = True
            else:
                self.reader.delete_shipped()
            return report
        lines = batch.lines
        if self.in_doubt:
            lines = self._not_yet_indexed(lines, report)
        try:
            retry = self._send(lines, report) if lines else False
        except SearchError:
            self.in_doubt, self._doubt_since = True, time.monotonic()
            raise
        self.counters.batches += 1
        if retry:
            self.counters.retried_batches += 1
            self.in_doubt, self._doubt_since = True, time.monotonic()
            return report
        self._observe_lag(batch.lines)
        self.reader.commit(batch)
        self.in_doubt = False
        report.committed = True
        return report

    def _observe_lag(self, lines: list[tuple[str, bytes]]) -> None:
        oldest = oldest_timestamp(lines)
        if oldest is None:
            return
        lag_s = max(0.0, time.time() - oldest)
        self.counters.lag_s = lag_s
        self.lag.observe(lag_s)

    def _send(self, lines: list[tuple[str, bytes]], report: ShipReport) -> bool:
        """One ``_bulk``; whether some line must be sent again (the engine did not take it for
        a passing reason)."""
        result = self.client.bulk_create_raw(self.stream.name, lines)
        self.counters.bytes_sent += result.request_bytes
        retry = False
        for item in result.items:
            if item.outcome is BulkOutcome.CREATED:
                report.created += 1
            elif item.outcome is BulkOutcome.ALREADY_EXISTS:
                report.already_indexed += 1
            elif item.retryable:
                retry = True
            else:
                # Refused for its content (a mapping conflict): sending it again changes
                # nothing, and it must not hold back every line behind it.
                report.refused += 1
                log.warning("log line %s refused by %s (%s): dropped", item.doc_id,
                            self.stream.name, item.error)
        self.counters.created += report.created
        self.counters.already_indexed += report.already_indexed
        self.counters.refused += report.refused
        return retry

    def _not_yet_indexed(self, lines: list[tuple[str, bytes]], report: ShipReport
                         ) -> list[tuple[str, bytes]]:
        grace_s = self.config.indexer_in_doubt_grace_ms / 1000
        self._stopping.wait(max(0.0, self._doubt_since + grace_s - time.monotonic()))
        self.client.refresh(self.stream.name)
        found = self.client.existing_ids(self.stream.name, [doc_id for doc_id, _ in lines])
        report.already_indexed += len(found)
        self.counters.already_indexed += len(found)
        if found:
            log.info("%d of %d log lines in doubt were already indexed in %s; sending the rest",
                     len(found), len(lines), self.stream.name)
        return [(doc_id, doc) for doc_id, doc in lines if doc_id not in found]

    def drain(self) -> int:
        """Ship until the spool is empty (tests, benchmarks); lines read."""
        read = 0
        while True:
            report = self.ship_once()
            read += report.read
            if report.read == 0 and self.reader.pending_bytes() == 0:
                return read
            if report.read and not report.committed:
                raise SearchError(f"the engine did not take every line of {self.stream.name}")

    # -- one shipper per spool directory --------------------------------------------------------

    def _hold_lock(self) -> bool:
        if self._lock_fd is not None:
            return True
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.spool_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            log.info("another log shipper ships %s; standing by", self.spool_dir)
            return False
        self._lock_fd = fd
        marker = self.spool_dir / CLEAN_STOP_NAME
        if marker.exists():
            marker.unlink()
            self.in_doubt = False  # the predecessor stopped with nothing unanswered
        elif self.reader.pending_bytes() == 0:
            # A predecessor can only have sent lines that were in the spool; none is
            # uncommitted, so nothing it sent is in doubt (and the first lines written from
            # now on do not wait for the grace).
            self.in_doubt = False
        return True

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None



def oldest_timestamp(lines: list[tuple[str, bytes]]) -> float | None:
    """The earliest ``@timestamp`` of ``lines`` (documents as the capture wrote them), in
    seconds since the epoch; None when no line has one in the capture's form."""
    oldest = None
    for _, document in lines:
        at = document.find(_TIMESTAMP_KEY)
        if at == -1:
            continue
        start = at + len(_TIMESTAMP_KEY)
        stamp = document[start:start + _TIMESTAMP_CHARS]
        if oldest is None or stamp < oldest:
            oldest = stamp
    if oldest is None:
        return None
    try:
        return datetime.fromisoformat(oldest.decode()).timestamp()
    except ValueError:
        return None


def stale_after_ms(config: ChronoConfig) -> int:
    """How long a shipper may go without a batch, an empty poll or a standby check before its
    /health says 503: its longest back-off after failures plus a standby's wait, at least 10 s
    of it (as the audit indexer's)."""
    return max(config.indexer_max_backoff_ms, 10_000) + int(STANDBY_RETRY_S * 1000)
