"""``chrono indexer``: ships the audit outbox to the audit data stream, in id order, in bulk.

One batch is: read the oldest unshipped rows (noting their ids as *in doubt* in the same
statement), send them with one ``_bulk`` request of ``create`` operations whose ``_id`` is the row
id, then mark what the engine answered for (created, or 409 already there) as shipped and no longer
in doubt. Rows the engine refused for a passing reason (429, 5xx) stay unshipped and go again after
a back-off; a document refused for its content is sent again in a reduced form (core fields, the
rest unindexed), so one odd row never blocks the stream.

Crash safety and rollover. Killed between the ``_bulk`` and the mark, an indexer leaves rows that
are in the engine but not marked shipped. Sending them again with ``create`` is harmless while they
are in the same backing index (409, counted as shipped), but a data stream only checks ``_id``
within its *write* index: after a rollover (ILM/ISM do one a day) a re-sent row would become a
second document. So rows whose ids are still in doubt (``IndexerState.in_doubt_ids``, written
before the request and cleared by the mark) are first looked up across every backing index of the
stream (refresh, then an ``ids`` query); those found are marked shipped, only the others are sent.
In steady state nothing is in doubt and no lookup is made. One indexer ships a stream at a time
(a PostgreSQL advisory lock); a second one waits as a standby.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from chronocore.probe import Progress
from search.client import BulkItemResult, BulkOutcome, SearchClient
from search.documents import OutboxRow, build_document
from search.errors import SearchError
from search.index_template import AuditStream, install
from search.outbox_retention import delete_shipped

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

log = logging.getLogger("chrono.indexer")

STATS_LOG_INTERVAL_S = 30.0
PRUNE_INTERVAL_S = 60.0
PRUNE_BATCH = 10_000
STANDBY_RETRY_S = 5.0
MIN_BACKOFF_S = 0.2
_REDUCED_CHRONO_FIELDS = ("tenant_id", "job_id", "execution_id", "actor")

_FETCH_SQL = (
    "WITH b AS (SELECT id, occurred_at, action, outcome, tenant_id, job_id, execution_id, actor, "
    "  message, data FROM search_auditevent WHERE shipped_at IS NULL ORDER BY id LIMIT %s), "
    "n AS (INSERT INTO search_indexerstate (data_stream, in_doubt_ids, updated_at) "
    "  SELECT %s, array_agg(id), now() FROM b HAVING count(*) > 0 "
    "  ON CONFLICT (data_stream) DO UPDATE SET updated_at = now(), in_doubt_ids = ARRAY("
    "    SELECT DISTINCT unnest(search_indexerstate.in_doubt_ids || EXCLUDED.in_doubt_ids))) "
    "SELECT b.id, b.occurred_at, b.action, b.outcome, b.tenant_id, b.job_id, b.execution_id, "
    "  b.actor, b.message, b.data, j.job_type, j.name, t.slug "
    "FROM b LEFT JOIN chrono_job j ON j.job_id = b.job_id "
    "LEFT JOIN chrono_tenant t ON t.tenant_id = b.tenant_id ORDER BY b.id"
)
_MARK_SQL = (
    "WITH s AS (UPDATE search_auditevent SET shipped_at = now() "
    "  WHERE id = ANY(%s::bigint[]) AND shipped_at IS NULL) "
    "UPDATE search_indexerstate SET updated_at = now(), in_doubt_ids = ARRAY("
    "  SELECT unnest(in_doubt_ids) EXCEPT SELECT unnest(%s::bigint[])) WHERE data_stream = %s"
)


@dataclass
class BatchReport:
    """What one batch did: rows read, documents created, rows found already indexed (409, or
    found by the in-doubt lookup), rows left for later, and the bytes sent."""

    read: int = 0
    created: int = 0
    already_indexed: int = 0
    left: int = 0
    bytes_sent: int = 0

    @property
    def shipped(self) -> int:
        return self.created + self.already_indexed


@dataclass
class IndexerCounters:
    batches: int = 0
    created: int = 0
    already_indexed: int = 0
    failed_iterations: int = 0
    pruned: int = 0
    bytes_sent: int = 0
    # Age of the oldest row of the last batch when it was read (0 when nothing was waiting):
    # how late audit events reach the engine.
    lag_s: float = 0.0

    def add(self, report: BatchReport) -> None:
        self.batches += 1
        self.created += report.created
        self.already_indexed += report.already_indexed
        self.bytes_sent += report.bytes_sent

    def summary(self) -> str:
        return (
            f"batches={self.batches} created={self.created} "
            f"already_indexed={self.already_indexed} mb_sent={self.bytes_sent / 1e6:.1f} "
            f"pruned={self.pruned} failed_iterations={self.failed_iterations}"
        )


class Indexer:
    """Ships one deployment's outbox to ``stream``. ``run()`` blocks until ``stop()``;
    :meth:`ship_once` is one batch (tests and benchmarks drive it directly)."""

    def __init__(
        self,
        *,
        client: SearchClient,
        config: ChronoConfig,
        stream: AuditStream | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.stream = stream or AuditStream.from_config(config)
        self.batch_size = batch_size or config.indexer_batch_size
        self.counters = IndexerCounters()
        # Marked after every batch (or standby check) that went through: the probe's /health.
        self.progress = Progress("batches", stale_after_ms=stale_after_ms(config))
        self._in_doubt: set[int] | None = None
        # When rows were last sent without an answer (this process's start, for a predecessor's).
        self._doubt_since = time.monotonic()
        self._locked = False
        self._stopping = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    @property
    def active(self) -> bool:
        """Whether this indexer holds the stream's lock (ships), rather than standing by."""
        return self._locked

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self) -> None:
        """Install the template and policies, then ship batches until :meth:`stop`."""
        self._until_done(lambda: install(self.client, self.config, self.stream), "install")
        log.info("indexer shipping the outbox to %s in batches of %d",
                 self.stream.name, self.batch_size)
        backoff_s = MIN_BACKOFF_S
        next_stats = next_prune = time.monotonic()
        while not self.stopping:
            try:
                if not self._hold_lock():
                    self.progress.mark()
                    self._stopping.wait(STANDBY_RETRY_S)
                    continue
                report = self.ship_once()
                if time.monotonic() >= next_prune:
                    self.prune()
                    next_prune = time.monotonic() + PRUNE_INTERVAL_S
                self.progress.mark()
            except (SearchError, DatabaseError, OSError) as exc:
                self.counters.failed_iterations += 1
                log.error("indexer batch failed, retrying in %.1f s: %r", backoff_s, exc)
                self._after_error(exc)
                self._stopping.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.config.indexer_max_backoff_ms / 1000)
                continue
            if time.monotonic() >= next_stats:
                log.info("indexer %s: %s", self.stream.name, self.counters.summary())
                next_stats = time.monotonic() + STATS_LOG_INTERVAL_S
            if report.left:
                log.warning("%d rows were not indexed this time; retrying in %.1f s",
                            report.left, backoff_s)
                self._stopping.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.config.indexer_max_backoff_ms / 1000)
                continue
            backoff_s = MIN_BACKOFF_S
            if report.read < self.batch_size:
                self._stopping.wait(self.config.indexer_poll_interval_ms / 1000)
        self._release_lock()
        log.info("indexer stopped: %s", self.counters.summary())

    def _until_done(self, step: Any, what: str) -> None:
        backoff_s = MIN_BACKOFF_S
        while not self.stopping:
            try:
                step()
                return
            except (SearchError, DatabaseError, OSError) as exc:
                log.error("indexer %s failed, retrying in %.1f s: %r", what, backoff_s, exc)
                self._after_error(exc)
                self._stopping.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.config.indexer_max_backoff_ms / 1000)

    def _after_error(self, exc: BaseException) -> None:
        if isinstance(exc, DatabaseError):
            # The connection (and the advisory lock it held) may be gone: start over.
            self._locked = False
            self._in_doubt = None
            close_old_connections()
            connection.close()

    # -- one stream, one indexer ------------------------------------------------------------------

    def _hold_lock(self) -> bool:
        if self._locked:
            return True
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                [f"chrono-indexer:{self.stream.name}"],
            )
            self._locked = bool(cursor.fetchone()[0])
        if not self._locked:
            log.info("another indexer ships %s; standing by", self.stream.name)
        return self._locked

    def _release_lock(self) -> None:
        if not self._locked:
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                    [f"chrono-indexer:{self.stream.name}"],
                )
        except DatabaseError as exc:
            log.warning("could not release the indexer lock (it goes with the connection): %r",
                        exc)
        self._locked = False

    # -- shipping -------------------------------------------------------------------------------

    def ship_once(self) -> BatchReport:
        """Ship the oldest unshipped rows, at most one batch; what happened."""
        in_doubt = self._load_in_doubt()
        rows = self._fetch()
        self.counters.lag_s = (
            (timezone.now() - rows[0].occurred_at).total_seconds() if rows else 0.0)
        report = BatchReport(read=len(rows))
        if not rows:
            return report
        shipped: list[int] = []
        doubtful = [row.id for row in rows if row.id in in_doubt]
        if doubtful:
            found = self._already_indexed(doubtful)
            shipped += found
            report.already_indexed += len(found)
            found_ids = set(found)
            rows = [row for row in rows if row.id not in found_ids]
        in_doubt.update(row.id for row in rows)
        try:
            failed = self._send(rows, report, shipped)
            if failed:
                failed = self._send_reduced(failed, report, shipped)
        except SearchError:
            self._doubt_since = time.monotonic()
            raise
        finally:
            self._mark_shipped(shipped)
        report.left = len(failed)
        self.counters.add(report)
        return report

    def _send(
        self, rows: Sequence[OutboxRow], report: BatchReport, shipped: list[int]
    ) -> list[tuple[OutboxRow, BulkItemResult]]:
        """Send ``rows``; add what the engine now holds to ``shipped``; the rows it refused,
        each with its answer."""
        namespace = self.stream.namespace
        documents = [(str(row.id), build_document(row, namespace=namespace)) for row in rows]
        return self._bulk(rows, documents, report, shipped)

    def _send_reduced(
        self,
        failed: list[tuple[OutboxRow, BulkItemResult]],
        report: BatchReport,
        shipped: list[int],
    ) -> list[tuple[OutboxRow, BulkItemResult]]:
        """Send again, in reduced form, the rows whose documents the engine refused for their
        content (rather than for its own state); the rows still refused."""
        retryable = [(row, item) for row, item in failed if item.retryable]
        refused = [row for row, item in failed if not item.retryable]
        for row, item in failed:
            if not item.retryable:
                log.warning("outbox row %d refused by %s (%s %s): sending it reduced",
                            row.id, self.stream.name, item.status, item.error)
        if not refused:
            return retryable
        namespace = self.stream.namespace
        documents = [(str(row.id), _reduced_document(row, namespace)) for row in refused]
        return retryable + self._bulk(refused, documents, report, shipped)

    def _bulk(
        self,
        rows: Sequence[OutboxRow],
        documents: list[tuple[str, dict[str, Any]]],
        report: BatchReport,
        shipped: list[int],
    ) -> list[tuple[OutboxRow, BulkItemResult]]:
        if not rows:
            return []
        result = self.client.bulk_create(self.stream.name, documents)
        report.bytes_sent += result.request_bytes
        failed: list[tuple[OutboxRow, BulkItemResult]] = []
        for row, item in zip(rows, result.items, strict=True):
            if item.outcome is BulkOutcome.CREATED:
                report.created += 1
                shipped.append(row.id)
            elif item.outcome is BulkOutcome.ALREADY_EXISTS:
                report.already_indexed += 1
                shipped.append(row.id)
            else:
                failed.append((row, item))
                # The engine answered for it: it was not created, so it is no longer in doubt.
                if self._in_doubt is not None:
                    self._in_doubt.discard(row.id)
        return failed

    def _already_indexed(self, row_ids: list[int]) -> list[int]:
        """Which of ``row_ids`` (sent before without a known answer) are in the stream."""
        # A request whose sender died or timed out may still be running in the engine: give it
        # time to finish before looking, or a row it is about to write could be sent again.
        grace_s = self.config.indexer_in_doubt_grace_ms / 1000
        self._stopping.wait(max(0.0, self._doubt_since + grace_s - time.monotonic()))
        self.client.refresh(self.stream.name)
        found = self.client.existing_ids(self.stream.name, [str(i) for i in row_ids])
        log.info("%d of %d outbox rows in doubt were already indexed in %s; sending the rest",
                 len(found), len(row_ids), self.stream.name)
        return sorted(int(doc_id) for doc_id in found)

    # -- PostgreSQL -------------------------------------------------------------------------------

    def _load_in_doubt(self) -> set[int]:
        if self._in_doubt is None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT in_doubt_ids FROM search_indexerstate WHERE data_stream = %s",
                    [self.stream.name],
                )
                row = cursor.fetchone()
            self._in_doubt = set(row[0]) if row else set()
            if self._in_doubt:
                log.info("%d outbox rows may have been sent before without an answer; they "
                         "are looked up in %s before being sent again",
                         len(self._in_doubt), self.stream.name)
        return self._in_doubt

    def _fetch(self) -> list[OutboxRow]:
        with connection.cursor() as cursor:
            cursor.execute(_FETCH_SQL, [self.batch_size, self.stream.name])
            return [
                OutboxRow(
                    id=r[0], occurred_at=r[1], action=r[2], outcome=r[3], tenant_id=r[4],
                    job_id=r[5], execution_id=r[6], actor=r[7], message=r[8], data=_json(r[9]),
                    job_type=r[10], job_name=r[11], tenant_slug=r[12],
                )
                for r in cursor.fetchall()
            ]

    def _mark_shipped(self, row_ids: list[int]) -> None:
        if not row_ids:
            return
        with connection.cursor() as cursor:
            cursor.execute(_MARK_SQL, [row_ids, row_ids, self.stream.name])
        if self._in_doubt is not None:
            self._in_doubt.difference_update(row_ids)

    def prune(self) -> int:
        """Delete rows shipped more than ``audit_outbox_keep_hours`` ago; how many."""
        before = timezone.now() - timedelta(hours=self.config.audit_outbox_keep_hours)
        total = delete_shipped(before, batch=PRUNE_BATCH, should_stop=lambda: self.stopping)
        self.counters.pruned += total
        return total


def stale_after_ms(config: ChronoConfig) -> int:
    """How long an indexer may go without a batch (or a standby check) before its /health says
    503: its longest back-off after failures plus a standby's wait, at least 10 s of it."""
    return max(config.indexer_max_backoff_ms, 10_000) + int(STANDBY_RETRY_S * 1000)


def _json(value: object) -> dict[str, Any]:
    # Django has psycopg hand jsonb over as text (its JSONField decodes it), so raw SQL gets text.
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}


def _reduced_document(row: OutboxRow, namespace: str) -> dict[str, Any]:
    """The document of a row whose full document was refused: the fields every search needs,
    everything else kept unindexed under ``chrono.details``."""
    full = build_document(row, namespace=namespace)
    chrono = full["chrono"]
    return {
        "@timestamp": full["@timestamp"],
        "message": str(full.get("message", ""))[:10_000],
        "tags": ["chrono_reduced"],
        "event": {k: full["event"][k] for k in ("action", "outcome", "id", "sequence", "dataset")},
        "data_stream": full["data_stream"],
        "chrono": {
            **{k: chrono[k] for k in _REDUCED_CHRONO_FIELDS if k in chrono},
            "details": {"document": full},
        },
    }

