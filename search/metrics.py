"""The indexer's series and health, for its probe port (:mod:`chronocore.probe`): the audit
indexer's and the execution-log shipper's (``chrono indexer`` runs both; ``--logs-only`` the
shipper alone, ``--no-logs`` the indexer alone).

Read from their own counters when Prometheus scrapes: the shipping loops pay nothing (the
shipper observes one histogram value per batch).
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from chronocore.probe import Check, CheckResult, ProbeServer, serve_probe
from search.indexer import Indexer
from search.log_shipper import LogShipper

_COUNTS = (
    ("batches", "chrono_indexer_batches", "Outbox batches shipped."),
    ("pruned", "chrono_indexer_pruned_rows",
     "Shipped outbox rows deleted after audit_outbox_keep_hours."),
    ("failed_iterations", "chrono_indexer_failed_batches",
     "Batches that failed (engine or PostgreSQL unreachable) and were retried."),
    ("bytes_sent", "chrono_indexer_sent_bytes", "Bytes of _bulk requests sent to the engine."),
)


class IndexerCollector:
    """Counters of one :class:`~search.indexer.Indexer` as Prometheus series."""

    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer

    def collect(self):
        counters = self.indexer.counters
        shipped = CounterMetricFamily(
            "chrono_indexer_shipped_rows",
            "Outbox rows the engine holds now: created, or found already indexed.",
            labels=["result"])
        shipped.add_metric(["created"], counters.created)
        shipped.add_metric(["already_indexed"], counters.already_indexed)
        yield shipped
        for attribute, name, documentation in _COUNTS:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], getattr(counters, attribute))
            yield family
        yield GaugeMetricFamily(
            "chrono_indexer_lag_seconds",
            "Age of the oldest outbox row of the last batch when it was read (0: none waited).",
            value=counters.lag_s)
        yield GaugeMetricFamily(
            "chrono_indexer_active",
            "1 while this indexer holds the stream's lock and ships, 0 while it stands by.",
            value=1 if self.indexer.active else 0)


_SHIPPER_COUNTS = (
    ("batches", "chrono_log_shipper_batches", "Spool batches sent to the engine with _bulk."),
    ("bytes_sent", "chrono_log_shipper_sent_bytes", "Bytes of _bulk requests sent."),
    ("torn_bytes", "chrono_log_shipper_torn_bytes",
     "Bytes of cut lines skipped at the end of finished segments (a writer killed mid-write)."),
    ("malformed_lines", "chrono_log_shipper_malformed_lines",
     "Spool lines that were not a document id and a document: skipped."),
)


class ShipperCollector:
    """Counters, lag and spool backlog of one :class:`~search.log_shipper.LogShipper`."""

    def __init__(self, shipper: LogShipper) -> None:
        self.shipper = shipper

    def collect(self):
        counters = self.shipper.counters
        lines = CounterMetricFamily(
            "chrono_log_shipper_lines",
            "Execution log lines the engine holds now, by what it answered: created, found "
            "already indexed (a re-send), or refused for their content (dropped).",
            labels=["result"])
        lines.add_metric(["created"], counters.created)
        lines.add_metric(["already_indexed"], counters.already_indexed)
        lines.add_metric(["refused"], counters.refused)
        yield lines
        errors = CounterMetricFamily(
            "chrono_log_shipper_bulk_errors",
            "_bulk requests that failed as a whole (engine down, 5xx, timeout: kind=request) "
            "or were answered with lines to send again (429: kind=items); retried, nothing "
            "committed.", labels=["kind"])
        errors.add_metric(["request"], counters.failed_iterations)
        errors.add_metric(["items"], counters.retried_batches)
        yield errors
        for attribute, name, documentation in _SHIPPER_COUNTS:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], getattr(counters, attribute))
            yield family
        yield GaugeMetricFamily(
            "chrono_log_shipper_lag_seconds",
            "The oldest line of the last batch the engine took: from when it was logged to the "
            "engine's answer.", value=counters.lag_s)
        yield from self.shipper.lag.collect()
        try:
            pending = self.shipper.reader.pending_bytes()
        except OSError:
            pending = float("nan")
        yield GaugeMetricFamily(
            "chrono_log_shipper_spool_pending_bytes",
            "Bytes of this host's spool written by workers and not shipped yet.", value=pending)
        yield GaugeMetricFamily(
            "chrono_log_shipper_active",
            "1 while this shipper holds the spool's lock and ships, 0 while it stands by.",
            value=1 if self.shipper.active else 0)


def shipper_checks(shipper: LogShipper) -> dict[str, Check]:
    """``/health`` of a log shipper: its batches (or, standing by, its lock checks) go through."""

    def shipping() -> CheckResult:
        result = shipper.progress.check()
        return CheckResult(result.healthy, {
            **result.details, "active": shipper.active,
            "lag_s": round(shipper.counters.lag_s, 3),
        })

    return {"log_shipper": shipping}


def indexer_checks(indexer: Indexer) -> dict[str, Check]:
    """``/health`` of an indexer: its batches (or, standing by, its lock checks) go through."""

    def batches() -> CheckResult:
        result = indexer.progress.check()
        return CheckResult(result.healthy, {
            **result.details, "active": indexer.active, "lag_s": round(indexer.counters.lag_s, 3),
        })

    return {"batches": batches}


def serve_indexer_probe(indexer: Indexer | None, *, port: int, address: str,
                        shipper: LogShipper | None = None,
                        registry: CollectorRegistry = REGISTRY) -> ProbeServer:
    """Serve ``/metrics`` and ``/health`` of the indexer process's ``indexer`` and ``shipper``
    (either may be None: ``--logs-only``, ``--no-logs``) on ``address:port``."""
    checks: dict[str, Check] = {}
    progresses = []
    if indexer is not None:
        registry.register(IndexerCollector(indexer))
        checks.update(indexer_checks(indexer))
        progresses.append(indexer.progress)
    if shipper is not None:
        registry.register(ShipperCollector(shipper))
        checks.update(shipper_checks(shipper))
        progresses.append(shipper.progress)
    return serve_probe(process="indexer", port=port, address=address, registry=registry,
                       checks=checks, progresses=progresses)
