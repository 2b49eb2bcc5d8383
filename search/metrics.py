"""The indexer's series and health, for its probe port (:mod:`chronocore.probe`).

Read from the indexer's own counters when Prometheus scrapes: the shipping loop pays nothing.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from chronocore.probe import Check, CheckResult, ProbeServer, serve_probe
from search.indexer import Indexer

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


def indexer_checks(indexer: Indexer) -> dict[str, Check]:
    """``/health`` of an indexer: its batches (or, standing by, its lock checks) go through."""

    def batches() -> CheckResult:
        result = indexer.progress.check()
        return CheckResult(result.healthy, {
            **result.details, "active": indexer.active, "lag_s": round(indexer.counters.lag_s, 3),
        })

    return {"batches": batches}


def serve_indexer_probe(indexer: Indexer, *, port: int, address: str,
                        registry: CollectorRegistry = REGISTRY) -> ProbeServer:
    """Serve the indexer's ``/metrics`` and ``/health`` on ``address:port``."""
    registry.register(IndexerCollector(indexer))
    return serve_probe(process="indexer", port=port, address=address, registry=registry,
                       checks=indexer_checks(indexer), progresses=[indexer.progress])
